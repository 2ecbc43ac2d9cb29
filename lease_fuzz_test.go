package shardlease_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/shardlease/shardlease"
)

// FuzzParseLeaseKey checks that no input makes ParseLeaseKey panic, that
// every failure matches ErrInvalidName and quotes the input, and that every
// key it accepts is valid and prints back as the input.
func FuzzParseLeaseKey(f *testing.F) {
	// More seeds are in testdata/fuzz/FuzzParseLeaseKey.
	f.Add("orders:shardId-000000000000")
	f.Add("orders")
	f.Fuzz(func(t *testing.T, s string) {
		k, err := shardlease.ParseLeaseKey(s)
		if err != nil {
			if !errors.Is(err, shardlease.ErrInvalidName) {
				t.Fatalf("ParseLeaseKey(%q): error does not match ErrInvalidName: %v", s, err)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "shardlease: ") || !strings.Contains(msg, "lease key") || !strings.Contains(msg, "use ") && !strings.Contains(msg, "a lease key is") {
				t.Fatalf("ParseLeaseKey(%q): error does not name the key and what to use: %v", s, err)
			}
			if k != (shardlease.LeaseKey{}) {
				t.Fatalf("ParseLeaseKey(%q): error %v with key %+v", s, err, k)
			}
			return
		}
		if k.String() != s {
			t.Fatalf("ParseLeaseKey(%q) = %+v, which prints as %q", s, k, k.String())
		}
		if err := k.Validate(); err != nil {
			t.Fatalf("ParseLeaseKey(%q) accepted a key that does not validate: %v", s, err)
		}
		if strings.Contains(k.Stream, ":") || k.Stream == "" || k.Shard == "" {
			t.Fatalf("ParseLeaseKey(%q) = %+v", s, k)
		}
	})
}
