package shardlease_test

import (
	"log/slog"
	"slices"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	dtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
)

// Defect: a row that turned corrupt while running made every shard sync
// fail until it was fixed, so that new shards got no row meanwhile. Now the
// sync leaves that row alone (one Error log, shardlease.rows.corrupt) and
// makes the other shards' rows; the corrupt row's shard is neither finished
// nor missing: its row is not made again and its children wait for it.
func TestOneReaderCorruptRowWhileRunningShardSync(t *testing.T) {
	t.Parallel()
	worlds(t, 2, func(t *testing.T, w *world) {
		if w.name != "emulator" {
			t.Skip("a MemoryStore row cannot be corrupt (it keeps decoded leases); the rule for a corrupt parent is TestParentsDoneCorruptParent")
		}
		logs := &logRecords{}
		rec := newRecorder()
		h := newHandled()
		a := startWorker(t, w, w.kin, w.store, h.handler("a"),
			w.opts("a", shardlease.WithLogger(slog.New(logs)), shardlease.WithMeterProvider(rec))...)
		waitFor(t, 10*w.lease, "a holds both shards", func() bool { return len(a.c.Held()) == 2 })
		shards := a.c.Held()
		bad, good := shards[0], shards[1]
		badKey := w.stream + ":" + bad

		ds := w.store.(*shardlease.DynamoStore)
		_, err := w.dynamo.UpdateItem(t.Context(), &dynamodb.UpdateItemInput{
			TableName:                 aws.String(ds.Table()),
			Key:                       map[string]dtypes.AttributeValue{"lease_key": &dtypes.AttributeValueMemberS{Value: badKey}},
			UpdateExpression:          aws.String("SET lease_counter = :bad"),
			ExpressionAttributeValues: map[string]dtypes.AttributeValue{":bad": &dtypes.AttributeValueMemberS{Value: "seven"}},
		})
		require.NoError(t, err)
		waitFor(t, 5*w.lease, "a gives up the corrupt row", func() bool { return !slices.Contains(a.c.Held(), bad) })

		badChildren := w.split(t, bad)
		goodChildren := w.split(t, good)
		p := &produced{}
		w.put(t, p, 60, 60)
		inGood := func() []string {
			p.mu.Lock()
			defer p.mu.Unlock()
			var ids []string
			for _, c := range goodChildren {
				ids = append(ids, p.byShard[c]...)
			}
			return ids
		}()
		require.NotEmpty(t, inGood, "some records went to the healthy shard's children")
		waitFor(t, 20*w.lease, "the healthy shard's children get rows and are read", func() bool {
			h.mu.Lock()
			defer h.mu.Unlock()
			for _, id := range inGood {
				if h.times[id] == 0 {
					return false
				}
			}
			return true
		})

		// The corrupt parent's children have rows, but nobody started them.
		rows, err := w.store.List(t.Context(), w.stream)
		var cre *shardlease.CorruptRowsError
		require.ErrorAs(t, err, &cre, "the listing still reports the corrupt row")
		require.Len(t, cre.Rows, 1)
		assert.Equal(t, badKey, cre.Rows[0].Key)
		byShard := map[string]shardlease.Lease{}
		for _, l := range rows {
			byShard[l.Key.Shard] = l
		}
		for _, c := range badChildren {
			l, ok := byShard[c]
			require.True(t, ok, "shard sync made the row of %s, a child of the corrupt row's shard", c)
			assert.Equal(t, []string{bad}, l.Parents)
			assert.Empty(t, l.Owner, "%s waits for its parent, whose row is corrupt", c)
			assert.Empty(t, l.Checkpoint, "%s was never read", c)
		}
		h.mu.Lock()
		for _, c := range badChildren {
			assert.Empty(t, h.byShard[c], "nothing of %s was handled", c)
		}
		assert.Empty(t, h.byShard[bad], "nothing of the corrupt row's shard was handled after it turned corrupt")
		h.mu.Unlock()

		// The corrupt row was not made again over.
		got, err := w.dynamo.GetItem(t.Context(), &dynamodb.GetItemInput{
			TableName: aws.String(ds.Table()), ConsistentRead: aws.Bool(true),
			Key: map[string]dtypes.AttributeValue{"lease_key": &dtypes.AttributeValueMemberS{Value: badKey}},
		})
		require.NoError(t, err)
		assert.Equal(t, &dtypes.AttributeValueMemberS{Value: "seven"}, got.Item["lease_counter"], "the corrupt row is left as it is")

		require.NoError(t, a.stop(t))
		reports := 0
		for _, r := range logs.at(slog.LevelError) {
			if attr(r, "row").String() == badKey {
				reports++
			}
		}
		assert.Equal(t, 1, reports, "the corrupt row is logged at Error once")
		rec.mu.Lock()
		assert.Equal(t, int64(1), rec.sums["shardlease.rows.corrupt"][""], "the corrupt row is counted once")
		rec.mu.Unlock()
	})
}
