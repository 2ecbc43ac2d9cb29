package shardlease_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
)

// floorStore is a built-in store with the way to delete a row by hand and,
// on DynamoDB, to write an identity row as a release that kept no floor did.
type floorStore struct {
	shardlease.LeaseStore
	deleteRow   func(t *testing.T, k shardlease.LeaseKey)
	rawIdentity func(t *testing.T, stream string, createdMs int64) // nil on the MemoryStore
}

// floorStores runs fn on both built-in stores.
func floorStores(t *testing.T, fn func(t *testing.T, s floorStore)) {
	t.Run("memory", func(t *testing.T) {
		t.Parallel()
		m := shardlease.NewMemoryStore()
		fn(t, floorStore{LeaseStore: m, deleteRow: func(t *testing.T, k shardlease.LeaseKey) { require.True(t, m.Delete(k)) }})
	})
	t.Run("dynamo", func(t *testing.T) {
		t.Parallel()
		client, table := dynamoTable(t)
		s, err := shardlease.NewDynamoStore(client, table)
		require.NoError(t, err)
		fn(t, floorStore{LeaseStore: s, deleteRow: func(t *testing.T, k shardlease.LeaseKey) {
			_, err := client.DeleteItem(t.Context(), &dynamodb.DeleteItemInput{
				TableName: aws.String(table),
				Key:       map[string]types.AttributeValue{"lease_key": &types.AttributeValueMemberS{Value: k.String()}},
			})
			require.NoError(t, err)
		}, rawIdentity: func(t *testing.T, stream string, createdMs int64) {
			_, err := client.PutItem(t.Context(), &dynamodb.PutItemInput{TableName: aws.String(table), Item: map[string]types.AttributeValue{
				"lease_key":      &types.AttributeValueMemberS{Value: stream + ":#identity"},
				"stream_arn":     &types.AttributeValueMemberS{Value: "arn:aws:kinesis:us-east-1:123456789012:stream/" + stream},
				"stream_created": &types.AttributeValueMemberN{Value: strconv.FormatInt(createdMs*1_000_000, 10)},
			}})
			require.NoError(t, err)
		}})
	})
}

// holdAndRelease acquires k as owner on the counter read, renews it n
// times, releases it and returns the acquire's lease (its token's counter).
func holdAndRelease(t *testing.T, s shardlease.LeaseStore, k shardlease.LeaseKey, owner string, n int) shardlease.Lease {
	t.Helper()
	ctx := t.Context()
	cur, err := s.Get(ctx, k)
	require.NoError(t, err)
	got, err := s.Acquire(ctx, k, owner, cur.Counter)
	require.NoError(t, err)
	l := got
	for range n {
		l, err = s.Renew(ctx, l, time.Now())
		require.NoError(t, err)
	}
	_, err = s.Release(ctx, l)
	require.NoError(t, err)
	return got
}

// A row deleted by hand and made again starts at counter 0, but its next
// acquire writes a counter above every counter an acquire of the stream
// wrote before: the fence floor outlives the row.
func TestFenceFloorOutlivesDeletedRows(t *testing.T) {
	t.Parallel()
	floorStores(t, func(t *testing.T, s floorStore) {
		k := shardlease.LeaseKey{Stream: "orders", Shard: "shardId-000000000000"}
		_, err := s.Create(t.Context(), k, nil)
		require.NoError(t, err)
		var last int64
		for i := range 3 {
			l := holdAndRelease(t, s, k, "a", 5)
			assert.Greater(t, l.Counter, last, "holding %d", i)
			last = l.Counter
		}
		s.deleteRow(t, k)
		_, err = s.Create(t.Context(), k, nil)
		require.NoError(t, err)
		made, err := s.Get(t.Context(), k)
		require.NoError(t, err)
		require.Less(t, made.Counter, last, "the row made again starts low")

		l := holdAndRelease(t, s, k, "b", 0)
		assert.Greater(t, l.Counter, last, "the next holding's counter is above every earlier holding's")
	})
}

// ResetStream (adopt-stream) and DeleteStreamRows (a Group's
// DeleteRemovedAfter) delete a stream's rows but keep its floor.
func TestFenceFloorSurvivesStreamDeletions(t *testing.T) {
	t.Parallel()
	floorStores(t, func(t *testing.T, s floorStore) {
		ctx := t.Context()
		ids := any(s.LeaseStore).(shardlease.IdentityStore)
		remover := any(s.LeaseStore).(shardlease.StreamRemover)
		k := shardlease.LeaseKey{Stream: "orders", Shard: "shardId-000000000000"}
		first := shardlease.StreamIdentity{Stream: "orders", ARN: "arn:aws:kinesis:us-east-1:123456789012:stream/orders", Created: time.UnixMilli(1_700_000_000_000)}
		_, _, err := ids.RecordStreamIdentity(ctx, first)
		require.NoError(t, err)
		_, err = s.Create(ctx, k, nil)
		require.NoError(t, err)
		before := holdAndRelease(t, s, k, "a", 3)

		deleted, held, err := remover.DeleteStreamRows(ctx, "orders", nil)
		require.NoError(t, err)
		require.Equal(t, 1, deleted)
		require.Zero(t, held)
		_, err = s.Create(ctx, k, nil)
		require.NoError(t, err)
		afterRemoval := holdAndRelease(t, s, k, "b", 3)
		assert.Greater(t, afterRemoval.Counter, before.Counter, "after DeleteStreamRows")
		assert.Equal(t, first.Created.UnixMilli(), shardlease.FenceEpochOf(afterRemoval), "the floor kept its epoch")

		second := first
		second.Created = first.Created.Add(time.Hour)
		_, err = ids.ResetStream(ctx, second)
		require.NoError(t, err)
		_, err = s.Create(ctx, k, nil)
		require.NoError(t, err)
		afterReset := holdAndRelease(t, s, k, "c", 0)
		assert.Greater(t, afterReset.Counter, afterRemoval.Counter, "after ResetStream")
		assert.Equal(t, second.Created.UnixMilli(), shardlease.FenceEpochOf(afterReset), "adopt-stream raised the epoch")
	})
}

// The floor's epoch comes from the table: an acquire whose worker knows
// nothing gets the epoch a worker that knows wrote, or the recorded
// identity's; it never goes down.
func TestFenceFloorEpochFromTheTable(t *testing.T) {
	t.Parallel()
	floorStores(t, func(t *testing.T, s floorStore) {
		ctx := t.Context()
		k := shardlease.LeaseKey{Stream: "orders", Shard: "shardId-000000000000"}
		_, err := s.Create(ctx, k, nil)
		require.NoError(t, err)
		acquire := func(ctx context.Context, owner string) shardlease.Lease {
			cur, err := s.Get(ctx, k)
			require.NoError(t, err)
			l, err := s.Acquire(ctx, k, owner, cur.Counter)
			require.NoError(t, err)
			_, err = s.Release(ctx, l)
			require.NoError(t, err)
			return l
		}
		blind := acquire(ctx, "blind")
		assert.Zero(t, shardlease.FenceEpochOf(blind), "nobody knows the stream yet")

		const created = int64(1_700_000_000_000)
		knowing := acquire(shardlease.WithKnownEpoch(ctx, created), "knowing")
		assert.Equal(t, created, shardlease.FenceEpochOf(knowing))
		blindAgain := acquire(ctx, "blind")
		assert.Equal(t, created, shardlease.FenceEpochOf(blindAgain), "a worker that cannot describe the stream reads the epoch from the table")
		stale := acquire(shardlease.WithKnownEpoch(ctx, created-1), "stale")
		assert.Equal(t, created, shardlease.FenceEpochOf(stale), "the epoch never goes down")

		// A recorded identity is read while the floor has no epoch.
		other := shardlease.LeaseKey{Stream: "payments", Shard: "shardId-000000000000"}
		_, err = s.Create(ctx, other, nil)
		require.NoError(t, err)
		ids := any(s.LeaseStore).(shardlease.IdentityStore)
		_, _, err = ids.RecordStreamIdentity(ctx, shardlease.StreamIdentity{Stream: "payments", ARN: "arn:aws:kinesis:us-east-1:123456789012:stream/payments", Created: time.UnixMilli(created + 5)})
		require.NoError(t, err)
		l, err := s.Acquire(ctx, other, "blind", 0)
		require.NoError(t, err)
		assert.Equal(t, created+5, shardlease.FenceEpochOf(l), "recording the identity raised the floor's epoch")

		// An identity row written without raising the floor (an earlier
		// release): an acquire reads it while the floor has no epoch.
		if s.rawIdentity == nil {
			return
		}
		third := shardlease.LeaseKey{Stream: "refunds", Shard: "shardId-000000000000"}
		_, err = s.Create(ctx, third, nil)
		require.NoError(t, err)
		s.rawIdentity(t, "refunds", created+9)
		l, err = s.Acquire(ctx, third, "blind", 0)
		require.NoError(t, err)
		assert.Equal(t, created+9, shardlease.FenceEpochOf(l), "the identity row's epoch, read by the acquire")
	})
}

// A consumer's acquire is conditional on the row it observed: a row deleted
// and made again meanwhile (here at the very counter observed) is not taken
// with a reservation made for the old one; observed anew, it is.
func TestFenceFloorAcquireRefusesARowMadeAgain(t *testing.T) {
	t.Parallel()
	floorStores(t, func(t *testing.T, s floorStore) {
		ctx := t.Context()
		k := shardlease.LeaseKey{Stream: "orders", Shard: "shardId-000000000000"}
		_, err := s.Create(ctx, k, nil)
		require.NoError(t, err)
		seen, err := s.Get(ctx, k)
		require.NoError(t, err)
		s.deleteRow(t, k)
		_, err = s.Create(ctx, k, nil)
		require.NoError(t, err)

		_, err = s.Acquire(shardlease.WithObservedRow(ctx, seen), k, "a", seen.Counter)
		require.ErrorIs(t, err, shardlease.ErrLeaseHeld, "the row observed is gone")
		now, err := s.Get(ctx, k)
		require.NoError(t, err)
		assert.False(t, now.Held(), "the refused acquire wrote nothing")

		l, err := s.Acquire(shardlease.WithObservedRow(ctx, now), k, "a", now.Counter)
		require.NoError(t, err)
		assert.Equal(t, "a", l.Owner)
	})
}

// A take round reserves one block of counters per stream for its takes:
// one floor write for many acquires, each counter still above every one
// reserved before, and every later acquire's above the block.
func TestFenceFloorOneReservationPerRound(t *testing.T) {
	t.Parallel()
	client, table := dynamoTable(t)
	counting := &countingDynamo{DynamoDBAPI: client}
	s, err := shardlease.NewDynamoStore(counting, table)
	require.NoError(t, err)
	ctx := shardlease.WithKnownEpoch(t.Context(), 1_700_000_000_000)
	var keys []shardlease.LeaseKey
	for i := range 5 {
		k := shardlease.LeaseKey{Stream: "orders", Shard: fmt.Sprintf("shardId-%012d", i)}
		_, err := s.Create(ctx, k, nil)
		require.NoError(t, err)
		keys = append(keys, k)
	}
	// An earlier holding: the floor has its epoch and a counter now.
	first, err := s.Acquire(ctx, keys[0], "a", 0)
	require.NoError(t, err)
	_, err = s.Release(ctx, first)
	require.NoError(t, err)

	before := counting.Calls()
	round := shardlease.WithRoundReservations(ctx, 5)
	var got []int64
	for _, k := range keys {
		cur, err := s.Get(ctx, k)
		require.NoError(t, err)
		l, err := s.Acquire(round, k, "b", cur.Counter)
		require.NoError(t, err)
		got = append(got, l.Counter)
	}
	assert.Equal(t, int64(5+5+1), counting.Calls()-before, "five reads, five acquires and one reservation")
	for i, c := range got {
		assert.Greater(t, c, first.Counter, "take %d is above the earlier holding", i)
		if i > 0 {
			assert.Greater(t, c, got[i-1], "the block's counters are handed out in order")
		}
	}
	_, err = s.Release(ctx, shardlease.Lease{Key: keys[4], Owner: "b", Counter: got[4]})
	require.NoError(t, err)
	later := holdAndRelease(t, s, keys[4], "c", 0)
	assert.Greater(t, later.Counter, slices.Max(got), "a later acquire reserves above the block")
}
