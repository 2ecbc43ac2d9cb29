package shardleasetest

import (
	"context"
	"fmt"
	"math"
	"math/big"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// onDemandShards is how many shards an on-demand stream starts with.
const onDemandShards = 4

// streamName resolves the stream a call names by StreamName or StreamARN.
func streamName(name, arn *string) (string, error) {
	var fromARN string
	if arn != nil {
		_, after, ok := strings.Cut(*arn, ":stream/")
		if !ok || !strings.HasPrefix(*arn, "arn:") || after == "" {
			return "", invalidArgument("StreamARN %q is not a Kinesis stream ARN.", *arn)
		}
		fromARN = after
	}
	switch {
	case name == nil && arn == nil:
		return "", invalidArgument("Either StreamName or StreamARN should be provided.")
	case name != nil && arn != nil && *name != fromARN:
		return "", invalidArgument("StreamName %q and StreamARN %q name different streams.", *name, *arn)
	case name != nil:
		if err := validName(*name); err != nil {
			return "", err
		}
		return *name, nil
	default:
		return fromARN, nil
	}
}

func validName(name string) error {
	if len(name) < 1 || len(name) > 128 || strings.TrimLeft(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") != "" {
		return invalidArgument("StreamName %q must be 1 to 128 characters of a-z, A-Z, 0-9, '_', '.' and '-'.", name)
	}
	return nil
}

// lookup returns the named stream. f.mu must be held.
func (f *Kinesis) lookup(name string) (*stream, error) {
	st := f.streams[name]
	if st == nil {
		return nil, streamNotFound(name)
	}
	return st, nil
}

// beginStream begins operation op on shardID (see begin), then names the
// stream given by name or arn (see streamName).
func (f *Kinesis) beginStream(ctx context.Context, op, shardID string, name, arn *string) (string, error) {
	if err := f.begin(ctx, op, shardID); err != nil {
		return "", err
	}
	return streamName(name, arn)
}

// lockStream locks f.mu and finds the stream called name. On success the
// caller holds f.mu and releases it with unlock; on error f.mu is not held.
func (f *Kinesis) lockStream(name string) (st *stream, unlock func(), err error) {
	return lockedFind(f, func() (*stream, error) { return f.lookup(name) })
}

// lockedFind locks f.mu and runs find under it. On success the caller holds
// f.mu and releases it with unlock; on error f.mu is not held.
func lockedFind[T any](f *Kinesis, find func() (T, error)) (v T, unlock func(), err error) {
	f.mu.Lock()
	v, err = find()
	if err != nil {
		f.mu.Unlock()
		var zero T
		return zero, nil, err
	}
	return v, f.mu.Unlock, nil
}

// CreateStream creates a stream whose hash key space is split evenly over
// ShardCount shards named shardId-000000000000 onwards. An on-demand stream
// without a ShardCount gets 4 shards. It takes records of up to
// MaxRecordSizeInKiB (1,024 to 10,240), [MaxRecordSize] without one. The
// stream is ACTIVE on return. A stream of that name existing already is a
// ResourceInUseException.
func (f *Kinesis) CreateStream(ctx context.Context, params *kinesis.CreateStreamInput, optFns ...func(*kinesis.Options)) (*kinesis.CreateStreamOutput, error) {
	if err := f.begin(ctx, OpCreateStream, ""); err != nil {
		return nil, err
	}
	if params == nil || params.StreamName == nil {
		return nil, invalidArgument("StreamName is required.")
	}
	name := *params.StreamName
	if err := validName(name); err != nil {
		return nil, err
	}
	var n int
	switch {
	case params.ShardCount != nil:
		n = int(*params.ShardCount)
		if n < 1 {
			return nil, invalidArgument("ShardCount %d must be at least 1.", n)
		}
	case params.StreamModeDetails != nil && params.StreamModeDetails.StreamMode == types.StreamModeOnDemand:
		n = onDemandShards
	default:
		return nil, invalidArgument("ShardCount is required for a PROVISIONED stream.")
	}
	maxRecord := MaxRecordSize
	if params.MaxRecordSizeInKiB != nil {
		kib, err := recordSizeKiB(*params.MaxRecordSizeInKiB)
		if err != nil {
			return nil, err
		}
		maxRecord = kib << 10
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	if f.streams[name] != nil {
		return nil, &types.ResourceInUseException{Message: ptr(fmt.Sprintf("Stream %s under account %s already exists.", name, Account))}
	}
	now := time.Now()
	f.incarnation++
	st := &stream{name: name, incarnation: f.incarnation, created: now, maxRecord: maxRecord}
	for _, r := range evenRanges(n) {
		st.addShard(r[0], r[1], "", "", now)
	}
	f.streams[name] = st
	return &kinesis.CreateStreamOutput{}, nil
}

// DeleteStream deletes a stream at once. Its iterators and ListShards tokens
// stop working, also if a stream of the same name is created again.
func (f *Kinesis) DeleteStream(ctx context.Context, params *kinesis.DeleteStreamInput, optFns ...func(*kinesis.Options)) (*kinesis.DeleteStreamOutput, error) {
	if params == nil {
		params = &kinesis.DeleteStreamInput{}
	}
	name, err := f.beginStream(ctx, OpDeleteStream, "", params.StreamName, params.StreamARN)
	if err != nil {
		return nil, err
	}
	st, unlock, err := f.lockStream(name)
	if err != nil {
		return nil, err
	}
	defer unlock()
	st.poke()
	delete(f.streams, name)
	return &kinesis.DeleteStreamOutput{}, nil
}

// SplitShard closes ShardToSplit and opens two children: the first over
// [parent start, NewStartingHashKey-1], the second over [NewStartingHashKey,
// parent end], both with ParentShardId set to the parent. NewStartingHashKey
// must lie strictly above the parent's start and no higher than its end.
// Splitting a shard that is already closed is an InvalidArgumentException.
func (f *Kinesis) SplitShard(ctx context.Context, params *kinesis.SplitShardInput, optFns ...func(*kinesis.Options)) (*kinesis.SplitShardOutput, error) {
	if params == nil {
		params = &kinesis.SplitShardInput{}
	}
	name, err := f.beginStream(ctx, OpSplitShard, deref(params.ShardToSplit), params.StreamName, params.StreamARN)
	if err != nil {
		return nil, err
	}
	if params.ShardToSplit == nil || params.NewStartingHashKey == nil {
		return nil, invalidArgument("ShardToSplit and NewStartingHashKey are required.")
	}
	key, ok := parseHashKey(*params.NewStartingHashKey)
	if !ok {
		return nil, invalidArgument("NewStartingHashKey %q is not a hash key (a decimal integer from 0 to 2^128-1).", *params.NewStartingHashKey)
	}

	st, unlock, err := f.lockStream(name)
	if err != nil {
		return nil, err
	}
	defer unlock()
	parent := st.shard(*params.ShardToSplit)
	if parent == nil {
		return nil, shardNotFound(name, *params.ShardToSplit)
	}
	if !parent.open() {
		return nil, invalidArgument("Shard %s in stream %s under account %s has already been merged or split, and thus is not eligible for merging or splitting.", parent.id, name, Account)
	}
	if key.Cmp(parent.start) <= 0 || key.Cmp(parent.end) > 0 {
		return nil, invalidArgument("NewStartingHashKey %s must be greater than the starting hash key %s and at most the ending hash key %s of shard %s.", key, parent.start, parent.end, parent.id)
	}
	// The parent closes first, so its ending sequence number sorts before
	// every sequence number of its children.
	now := time.Now()
	st.close(parent, now)
	low := st.addShard(new(big.Int).Set(parent.start), new(big.Int).Sub(key, big.NewInt(1)), parent.id, "", now)
	high := st.addShard(new(big.Int).Set(key), new(big.Int).Set(parent.end), parent.id, "", now)
	parent.children = []string{low.id, high.id}
	return &kinesis.SplitShardOutput{}, nil
}

// MergeShards closes ShardToMerge and AdjacentShardToMerge, which must be open
// and adjacent (one's hash key range ends just below the other's), and opens a
// child over both ranges with ParentShardId ShardToMerge and
// AdjacentParentShardId AdjacentShardToMerge.
func (f *Kinesis) MergeShards(ctx context.Context, params *kinesis.MergeShardsInput, optFns ...func(*kinesis.Options)) (*kinesis.MergeShardsOutput, error) {
	if params == nil {
		params = &kinesis.MergeShardsInput{}
	}
	name, err := f.beginStream(ctx, OpMergeShards, deref(params.ShardToMerge), params.StreamName, params.StreamARN)
	if err != nil {
		return nil, err
	}
	if params.ShardToMerge == nil || params.AdjacentShardToMerge == nil {
		return nil, invalidArgument("ShardToMerge and AdjacentShardToMerge are required.")
	}

	st, unlock, err := f.lockStream(name)
	if err != nil {
		return nil, err
	}
	defer unlock()
	a, b := st.shard(*params.ShardToMerge), st.shard(*params.AdjacentShardToMerge)
	if a == nil {
		return nil, shardNotFound(name, *params.ShardToMerge)
	}
	if b == nil {
		return nil, shardNotFound(name, *params.AdjacentShardToMerge)
	}
	for _, s := range []*shard{a, b} {
		if !s.open() {
			return nil, invalidArgument("Shard %s in stream %s under account %s has already been merged or split, and thus is not eligible for merging or splitting.", s.id, name, Account)
		}
	}
	lo, hi := a, b
	if hi.start.Cmp(lo.start) < 0 {
		lo, hi = hi, lo
	}
	if new(big.Int).Add(lo.end, big.NewInt(1)).Cmp(hi.start) != 0 {
		return nil, invalidArgument("Shards %s and %s in stream %s under account %s are not an adjacent pair of shards eligible for merging", a.id, b.id, name, Account)
	}
	now := time.Now()
	st.close(a, now)
	st.close(b, now)
	child := st.addShard(new(big.Int).Set(lo.start), new(big.Int).Set(hi.end), a.id, b.id, now)
	a.children = []string{child.id}
	b.children = []string{child.id}
	return &kinesis.MergeShardsOutput{}, nil
}

// listToken is the state a ListShards NextToken carries.
type listToken struct {
	Fake        uint64
	Stream      string
	Incarnation uint64
	After       int // shard number the next page starts after
	Filter      types.ShardFilterType
	FilterTime  time.Time
	Issued      int64 // unix nanoseconds
}

// ListShards lists a stream's shards, open and closed, in shard id order.
// MaxResults defaults to, and is capped at, 1000; a NextToken is returned
// while more shards remain. StreamName (or StreamARN), ExclusiveStartShardId,
// ShardFilter and StreamCreationTimestamp cannot be combined with NextToken
// (InvalidArgumentException). A token older than 300 seconds is an
// ExpiredNextTokenException. ShardFilter supports every type.
func (f *Kinesis) ListShards(ctx context.Context, params *kinesis.ListShardsInput, optFns ...func(*kinesis.Options)) (*kinesis.ListShardsOutput, error) {
	if err := f.begin(ctx, OpListShards, ""); err != nil {
		return nil, err
	}
	if params == nil {
		params = &kinesis.ListShardsInput{}
	}
	limit := MaxListShardsResults
	if params.MaxResults != nil {
		if *params.MaxResults < 1 {
			return nil, invalidArgument("MaxResults %d must be at least 1.", *params.MaxResults)
		}
		limit = min(int(*params.MaxResults), MaxListShardsResults)
	}
	now := time.Now()

	var tok listToken
	if params.NextToken != nil {
		if params.StreamName != nil || params.StreamARN != nil || params.ExclusiveStartShardId != nil ||
			params.ShardFilter != nil || params.StreamCreationTimestamp != nil {
			return nil, invalidArgument("NextToken and StreamName, StreamARN, ExclusiveStartShardId, ShardFilter or StreamCreationTimestamp cannot be provided together.")
		}
		if err := decode(*params.NextToken, &tok); err != nil || tok.Fake != f.id {
			return nil, invalidArgument("Invalid NextToken.")
		}
		if now.Sub(time.Unix(0, tok.Issued)) >= NextTokenTTL {
			return nil, &types.ExpiredNextTokenException{Message: ptr(fmt.Sprintf("The timestamp in the NextToken has expired; a NextToken is valid for %v.", NextTokenTTL))}
		}
	} else {
		var err error
		if tok, err = f.newListToken(params); err != nil {
			return nil, err
		}
	}

	st, unlock, err := f.lockStream(tok.Stream)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if tok.Incarnation == 0 {
		if params.StreamCreationTimestamp != nil && !params.StreamCreationTimestamp.Equal(st.created) {
			return nil, streamNotFound(tok.Stream)
		}
		tok.Incarnation = st.incarnation
	} else if tok.Incarnation != st.incarnation {
		return nil, streamNotFound(tok.Stream)
	}

	out := &kinesis.ListShardsOutput{}
	first := min(tok.After+1, len(st.shards))
	for _, s := range st.shards[first:] {
		if !tok.matches(s) || f.agedOut(s, now) {
			continue
		}
		if len(out.Shards) == limit {
			next := tok
			next.After = s.num - 1
			next.Issued = now.UnixNano()
			out.NextToken = ptr(encode(next))
			break
		}
		out.Shards = append(out.Shards, s.describe())
	}
	return out, nil
}

// newListToken is the state of a ListShards call without a NextToken: the
// stream it names, where it starts and its filter.
func (f *Kinesis) newListToken(params *kinesis.ListShardsInput) (listToken, error) {
	name, err := streamName(params.StreamName, params.StreamARN)
	if err != nil {
		return listToken{}, err
	}
	tok := listToken{Fake: f.id, Stream: name, After: -1}
	if params.ExclusiveStartShardId != nil {
		tok.After = afterShard(*params.ExclusiveStartShardId)
	}
	if sf := params.ShardFilter; sf != nil {
		tok.Filter = sf.Type
		switch sf.Type {
		case types.ShardFilterTypeAtLatest, types.ShardFilterTypeAtTrimHorizon, types.ShardFilterTypeFromTrimHorizon:
		case types.ShardFilterTypeAfterShardId:
			if sf.ShardId == nil {
				return listToken{}, invalidArgument("ShardFilter of type AFTER_SHARD_ID needs a ShardId.")
			}
			tok.After = max(tok.After, afterShard(*sf.ShardId))
		case types.ShardFilterTypeAtTimestamp, types.ShardFilterTypeFromTimestamp:
			if sf.Timestamp == nil {
				return listToken{}, invalidArgument("ShardFilter of type %s needs a Timestamp.", sf.Type)
			}
			tok.FilterTime = *sf.Timestamp
		default:
			return listToken{}, invalidArgument("ShardFilter type %q is not one of %v.", sf.Type, sf.Type.Values())
		}
	}
	return tok, nil
}

func (t listToken) matches(s *shard) bool {
	switch t.Filter {
	case types.ShardFilterTypeAtLatest:
		return s.open()
	case types.ShardFilterTypeAtTrimHorizon:
		// Without retention the oldest shards are those without parents.
		return s.parent == ""
	case types.ShardFilterTypeAtTimestamp:
		return !s.created.After(t.FilterTime) && (s.open() || s.closedAt.After(t.FilterTime))
	case types.ShardFilterTypeFromTimestamp:
		return s.open() || s.closedAt.After(t.FilterTime)
	default:
		return true
	}
}

// afterShard returns the shard number a listing that starts after id starts
// after. Ids that are not shard ids sort before every shard.
func afterShard(id string) int {
	if n, ok := parseShardID(id); ok {
		return n
	}
	if id > shardID(0) {
		return math.MaxInt32 // sorts after every shard id this fake makes
	}
	return -1
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
