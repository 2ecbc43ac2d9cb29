package shardlease

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
)

// incarnationMark separates the user's owner id from the random incarnation
// in the identity a consumer writes into rows: "pod-0#a1b2c3d4e5f60718".
const incarnationMark = "#"

// incarnationBytes is the size of the random incarnation: 64 bits, so that
// two runs never write the same identity.
const incarnationBytes = 8

// newIncarnation returns the identity one run of a consumer (or one CLI
// command) writes into rows: the user's owner id, readable, plus a random
// incarnation. Two processes started with the same owner id (a reused pod
// name while the old pod still runs, two consumers of one stream in one
// process) thus never take each other's rows for their own.
func newIncarnation(owner string) string {
	var b [incarnationBytes]byte
	_, _ = rand.Read(b[:])
	return owner + incarnationMark + hex.EncodeToString(b[:])
}

// NewOwnerIdentity returns a fresh identity for owner: the owner id plus a
// random 64-bit incarnation, as a consumer writes into rows for each run.
// Tools that write lease rows themselves (the shardlease CLI does) use one
// per command, so that no two writers ever share an identity.
func NewOwnerIdentity(owner string) string { return newIncarnation(owner) }

// OwnerName returns the owner id a user configured (WithOwnerID) from an
// identity written in a row, by cutting the incarnation off:
// OwnerName("pod-0#a1b2c3d4e5f60718") is "pod-0". An identity without an
// incarnation (written by an earlier release, or by hand) is returned as it
// is.
func OwnerName(identity string) string {
	i := strings.LastIndex(identity, incarnationMark)
	if i < 0 || len(identity)-i-1 != 2*incarnationBytes {
		return identity
	}
	if _, err := hex.DecodeString(identity[i+1:]); err != nil {
		return identity
	}
	return identity[:i]
}
