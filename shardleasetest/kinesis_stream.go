package shardleasetest

import (
	"crypto/md5"
	"fmt"
	"math/big"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// Sequence numbers are seqWidth decimal digits: seqPrefix, then a counter
// that increases with every number a stream hands out (seqCounterWidth
// digits), then the number of the shard it belongs to (seqShardWidth digits).
// The counter sits above the shard number, so numbers increase over the whole
// stream, and the fixed width makes string order agree with numeric order.
const (
	seqPrefix       = "49"
	seqCounterWidth = 40
	seqShardWidth   = 14
	seqWidth        = len(seqPrefix) + seqCounterWidth + seqShardWidth // 56
)

// maxHashKey is 2^128 - 1, the top of the hash key space.
var maxHashKey = new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 128), big.NewInt(1))

type stream struct {
	name        string
	incarnation uint64
	created     time.Time
	counter     uint64
	maxRecord   int           // the largest record it takes, data plus partition key
	shards      []*shard      // index is the shard's number
	changed     chan struct{} // closed at the next change; see changes
}

type shard struct {
	id                string
	num               int
	parent, adjacent  string
	start, end        *big.Int // hash key range, inclusive
	startSeq, endSeq  string   // endSeq is "" while the shard is open
	created, closedAt time.Time
	children          []string
	records           []types.Record
	reads             []time.Time // GetRecords calls in the last second
}

func (s *shard) open() bool { return s.endSeq == "" }

func (s *shard) hashKeyRange() *types.HashKeyRange {
	return &types.HashKeyRange{StartingHashKey: ptr(s.start.String()), EndingHashKey: ptr(s.end.String())}
}

func (s *shard) describe() types.Shard {
	out := types.Shard{
		ShardId:             ptr(s.id),
		HashKeyRange:        s.hashKeyRange(),
		SequenceNumberRange: &types.SequenceNumberRange{StartingSequenceNumber: ptr(s.startSeq)},
	}
	if s.parent != "" {
		out.ParentShardId = ptr(s.parent)
	}
	if s.adjacent != "" {
		out.AdjacentParentShardId = ptr(s.adjacent)
	}
	if !s.open() {
		out.SequenceNumberRange.EndingSequenceNumber = ptr(s.endSeq)
	}
	return out
}

func shardID(num int) string { return fmt.Sprintf("shardId-%012d", num) }

func (st *stream) arn() string {
	return fmt.Sprintf("arn:aws:kinesis:%s:%s:stream/%s", Region, Account, st.name)
}

// nextSeq hands out the next sequence number of the stream, for shard num.
func (st *stream) nextSeq(num int) string {
	st.counter++
	return fmt.Sprintf("%s%0*d%0*d", seqPrefix, seqCounterWidth, st.counter, seqShardWidth, num)
}

// addShard creates an open shard over [start, end].
func (st *stream) addShard(start, end *big.Int, parent, adjacent string, now time.Time) *shard {
	num := len(st.shards)
	s := &shard{
		id: shardID(num), num: num, parent: parent, adjacent: adjacent,
		start: start, end: end, startSeq: st.nextSeq(num), created: now,
	}
	st.shards = append(st.shards, s)
	return s
}

// close closes s; the caller then records its children.
func (st *stream) close(s *shard, now time.Time) {
	s.endSeq = st.nextSeq(s.num)
	s.closedAt = now
	st.poke()
}

// poke wakes the subscriptions waiting for the stream to change. f.mu must
// be held.
func (st *stream) poke() {
	if st.changed != nil {
		close(st.changed)
		st.changed = nil
	}
}

// changes returns a channel closed at the stream's next change (a record
// put, a shard closed). f.mu must be held.
func (st *stream) changes() <-chan struct{} {
	if st.changed == nil {
		st.changed = make(chan struct{})
	}
	return st.changed
}

// childShards describes the children of s, a closed shard of st, as the
// last GetRecords output or subscription event of s lists them.
func (st *stream) childShards(s *shard) []types.ChildShard {
	var out []types.ChildShard
	for _, id := range s.children {
		c := st.shard(id)
		parents := []string{c.parent}
		if c.adjacent != "" {
			parents = append(parents, c.adjacent)
		}
		out = append(out, types.ChildShard{ShardId: ptr(c.id), ParentShards: parents, HashKeyRange: c.hashKeyRange()})
	}
	return out
}

func (st *stream) shard(id string) *shard {
	num, ok := parseShardID(id)
	if !ok || num >= len(st.shards) {
		return nil
	}
	return st.shards[num]
}

func parseShardID(id string) (int, bool) {
	digits, ok := strings.CutPrefix(id, "shardId-")
	if !ok || len(digits) != 12 {
		return 0, false
	}
	n, err := strconv.Atoi(digits)
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}

// route returns the open shard whose hash key range holds h.
func (st *stream) route(h *big.Int) *shard {
	for _, s := range st.shards {
		if s.open() && s.start.Cmp(h) <= 0 && h.Cmp(s.end) <= 0 {
			return s
		}
	}
	return nil // unreachable: the open shards always cover the key space
}

// partitionHash is the 128-bit hash key Kinesis derives from a partition key:
// its MD5 digest read as a big-endian unsigned integer.
func partitionHash(key string) *big.Int {
	sum := md5.Sum([]byte(key))
	return new(big.Int).SetBytes(sum[:])
}

// parseHashKey parses a decimal hash key in [0, 2^128-1].
func parseHashKey(s string) (*big.Int, bool) {
	if s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return nil, false
	}
	h, ok := new(big.Int).SetString(s, 10)
	if !ok || h.Cmp(maxHashKey) > 0 {
		return nil, false
	}
	return h, true
}

// parseSeq checks a sequence number's form and returns the shard number it
// encodes.
func parseSeq(seq string) (shardNum int, ok bool) {
	if len(seq) != seqWidth || !strings.HasPrefix(seq, seqPrefix) || strings.TrimLeft(seq, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.Atoi(seq[seqWidth-seqShardWidth:])
	if err != nil {
		return 0, false
	}
	return n, true
}

// evenRanges splits the hash key space into n ranges the way Kinesis does for
// a new stream: each starts at i * floor(2^128 / n); the last ends at 2^128-1.
func evenRanges(n int) [][2]*big.Int {
	space := new(big.Int).Lsh(big.NewInt(1), 128)
	step := new(big.Int).Div(space, big.NewInt(int64(n)))
	out := make([][2]*big.Int, n)
	for i := range n {
		start := new(big.Int).Mul(step, big.NewInt(int64(i)))
		end := new(big.Int).Sub(new(big.Int).Add(start, step), big.NewInt(1))
		if i == n-1 {
			end = new(big.Int).Set(maxHashKey)
		}
		out[i] = [2]*big.Int{start, end}
	}
	return out
}
