package shardlease_test

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	kintypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/internal/emulator"
)

func shardID(n int) string { return fmt.Sprintf("shardId-%012d", n) }

// importedRow is what a row should hold after an import.
type importedRow struct {
	checkpoint string
	parents    []string
}

// requireImported checks the stream's rows against want: exactly these
// shards, each free at counter 0 with that checkpoint and those parents.
func requireImported(t *testing.T, s shardlease.LeaseStore, stream string, want map[string]importedRow) {
	t.Helper()
	rows, err := s.List(t.Context(), stream)
	require.NoError(t, err)
	got := map[string]importedRow{}
	for _, l := range rows {
		require.False(t, l.Held(), "row %s", l.Key)
		require.Equal(t, int64(-1), l.SubSequence, "row %s", l.Key)
		got[l.Key.Shard] = importedRow{checkpoint: l.Checkpoint, parents: l.Parents}
	}
	require.Equal(t, want, got)
}

// TestImportPeerTables imports the tables kinsumer and vmware-go-kcl-v2
// wrote themselves (testdata/peer-tables) as they are. Their sequence
// numbers belong to a kinesalite stream that no longer exists: checked
// against the recorded listing of that stream, each shard gets the expected
// checkpoint, finished state and parents (from the stream: kinsumer's rows
// have none); aimed at a fresh stream of the same shape, the stream guard
// refuses them and nothing is written.
func TestImportPeerTables(t *testing.T) {
	t.Parallel()
	const parent = "shardId-000000000001"
	for _, tc := range []struct {
		dir, file   string
		format      shardlease.ImportFormat
		want        map[string]importedRow
		notInSource []string
		rejected    int // rows the fresh stream rejects
	}{
		{
			dir: "kinsumer", file: "checkpoints-table.json", format: shardlease.ImportKinsumer,
			want: map[string]importedRow{
				shardID(0): {checkpoint: "49680716814346593819553817476229000196774386053173739522"},
				shardID(1): {checkpoint: shardlease.ShardEnd},
				shardID(2): {checkpoint: shardlease.ShardEnd},
				shardID(3): {checkpoint: "49680716814413496055149409345651189499953101879342268466"},
				shardID(4): {checkpoint: "49680716820858411417524759433558638858207322242094727234", parents: []string{parent}},
				shardID(5): {checkpoint: "49680716820880712162723290054111864396685049471835308114", parents: []string{parent}},
			},
			// Shard 2 split after kinsumer last wrote its table.
			notInSource: []string{shardID(6), shardID(7)},
			rejected:    5, // all but shard 1's SHARD_END; shard 2 is open in the fresh stream
		},
		{
			dir: "vmware-go-kcl-v2", file: "lease-table.json", format: shardlease.ImportVMwareKCL,
			want: map[string]importedRow{
				shardID(0): {checkpoint: "49680716814346593819553817474231854742771011990769893378"},
				shardID(1): {checkpoint: shardlease.ShardEnd},
				shardID(2): {checkpoint: "49680716814391195309950878720534268992430142849296629794"},
				shardID(3): {checkpoint: "49680716814413496055149409343645581565212425343996002354"},
				shardID(4): {checkpoint: "49680716822999282956583699253169474097311639648954482754", parents: []string{parent}},
				shardID(5): {checkpoint: "49680716823021583701782229875360794121367189410421932114", parents: []string{parent}},
			},
			rejected: 5,
		},
	} {
		t.Run(string(tc.format), func(t *testing.T) {
			ctx := t.Context()
			raw, table := dynamoTable(t)
			from := loadScan(t, raw, tc.dir, tc.file)
			s := newStore(t, raw, table)

			// Replayed against the stream the table was written for.
			rep, err := shardlease.Import(ctx, raw, recordedShards(t, tc.dir), tc.format, from, s, "recorded")
			require.NoError(t, err)
			require.Equal(t, len(tc.want), rep.Copied)
			require.Zero(t, rep.Skipped)
			require.Equal(t, len(tc.notInSource), rep.NotInSource)
			for _, r := range rep.Results {
				if r.Action == shardlease.ImportNotInSource {
					require.Contains(t, tc.notInSource, r.Shard)
					require.Contains(t, r.Reason, "a consumer reads it from its first record once its parent shardId-000000000002 is finished")
				}
			}
			requireImported(t, s, "recorded", tc.want)
			requireIdempotent(t, raw, recordedShards(t, tc.dir), tc.format, from, table, "recorded")

			// The other formats' names are refused with an error that says
			// what the table looks like.
			other := shardlease.ImportKCL
			_, err = shardlease.Import(ctx, raw, recordedShards(t, tc.dir), other, from, s, "recorded")
			require.ErrorIs(t, err, shardlease.ErrBadTableSchema)
			var schema *shardlease.ImportSchemaError
			require.ErrorAs(t, err, &schema)
			require.Equal(t, string(tc.format), schema.LooksLike)
			require.ErrorContains(t, err, fmt.Sprintf("it looks like a %s table: import it with format %q; the formats are kinsumer (key Shard), vmware-go-kcl-v2 (key ShardID), kcl (key leaseKey)", tc.format, tc.format))

			// Aimed at a fresh stream with the same shards (4, shard 1
			// split), the rows are refused and nothing is written.
			live := newLiveStream(t, 4)
			live.split(t, parent)
			require.Equal(t, "127605887595351923798765477786913079295", aws.ToString(live.shards[shardID(5)].HashKeyRange.StartingHashKey), "split where the recorded stream was")
			kc, stream := live.kc, live.name
			counting := &countingDynamo{DynamoDBAPI: raw}
			fresh := newStore(t, counting, table)
			_, err = shardlease.Import(ctx, raw, kc, tc.format, from, fresh, stream)
			require.ErrorIs(t, err, shardlease.ErrImportWrongStream)
			var mismatch *shardlease.ImportMismatchError
			require.ErrorAs(t, err, &mismatch)
			require.Len(t, mismatch.Rejected, tc.rejected, "%v", mismatch.Rejected)
			require.ErrorContains(t, err, "nothing was written")
			require.Zero(t, counting.Writes())
			rows, err := fresh.List(ctx, stream)
			require.NoError(t, err)
			require.Empty(t, rows)
		})
	}
}

// importLayout writes a source table in one library's layout.
type importLayout struct {
	format shardlease.ImportFormat
	key    string
	// row returns the item for shard; checkpoint is a sequence number,
	// ShardEnd, or "" for a row without progress.
	row func(shard, checkpoint string, parents []string) map[string]types.AttributeValue
}

var importLayouts = []importLayout{
	{format: shardlease.ImportKinsumer, key: "Shard", row: func(shard, cp string, _ []string) map[string]types.AttributeValue {
		now := time.Now()
		item := map[string]types.AttributeValue{
			"Shard":          &types.AttributeValueMemberS{Value: shard},
			"SequenceNumber": &types.AttributeValueMemberNULL{Value: true},
			"LastUpdate":     &types.AttributeValueMemberN{Value: strconv.FormatInt(now.UnixNano(), 10)},
			"LastUpdateRFC":  &types.AttributeValueMemberS{Value: now.UTC().Format(time.RFC1123Z)},
			"Finished":       &types.AttributeValueMemberNULL{Value: true},
			"FinishedRFC":    &types.AttributeValueMemberNULL{Value: true},
		}
		switch cp {
		case "":
		case shardlease.ShardEnd:
			// kinsumer keeps the last sequence number of a finished shard;
			// Finished is what says it is done.
			item["SequenceNumber"] = &types.AttributeValueMemberS{Value: "49000000000000000000000000000000000000000000000000000000"}
			item["Finished"] = &types.AttributeValueMemberN{Value: strconv.FormatInt(now.UnixNano(), 10)}
			item["FinishedRFC"] = &types.AttributeValueMemberS{Value: now.UTC().Format(time.RFC1123Z)}
		default:
			item["SequenceNumber"] = &types.AttributeValueMemberS{Value: cp}
		}
		return item
	}},
	{format: shardlease.ImportVMwareKCL, key: "ShardID", row: func(shard, cp string, parents []string) map[string]types.AttributeValue {
		item := map[string]types.AttributeValue{
			"ShardID":      &types.AttributeValueMemberS{Value: shard},
			"LeaseTimeout": &types.AttributeValueMemberS{Value: time.Now().UTC().Format(time.RFC3339Nano)},
		}
		if cp != "" {
			item["Checkpoint"] = &types.AttributeValueMemberS{Value: cp}
		}
		if len(parents) > 0 {
			item["ParentShardId"] = &types.AttributeValueMemberS{Value: parents[0]}
		}
		return item
	}},
	{format: shardlease.ImportKCL, key: "leaseKey", row: func(shard, cp string, parents []string) map[string]types.AttributeValue {
		if cp == "" {
			cp = "TRIM_HORIZON"
		}
		item := map[string]types.AttributeValue{
			"leaseKey":                     &types.AttributeValueMemberS{Value: shard},
			"checkpoint":                   &types.AttributeValueMemberS{Value: cp},
			"checkpointSubSequenceNumber":  &types.AttributeValueMemberN{Value: "0"},
			"leaseCounter":                 &types.AttributeValueMemberN{Value: "42"},
			"ownerSwitchesSinceCheckpoint": &types.AttributeValueMemberN{Value: "0"},
		}
		if len(parents) > 0 {
			item["parentShardId"] = &types.AttributeValueMemberSS{Value: parents}
		}
		return item
	}},
}

// putRows writes rows (shard → checkpoint) in layout l into a new table.
func (l importLayout) putRows(t *testing.T, client shardlease.DynamoDBAPI, rows map[string]string, parents map[string][]string) string {
	t.Helper()
	table := foreignTable(t, client, string(l.format), l.key)
	for shard, cp := range rows {
		_, err := client.PutItem(t.Context(), &dynamodb.PutItemInput{TableName: aws.String(table), Item: l.row(shard, cp, parents[shard])})
		require.NoError(t, err)
	}
	return table
}

// liveStream is a kinesalite stream with records put into chosen shards.
type liveStream struct {
	kc     *kinesis.Client
	name   string
	shards map[string]kintypes.Shard
	seqs   map[string][]string // shard → sequence numbers in order
	ids    map[string][]string // shard → record ids in order
	n      int
}

func newLiveStream(t *testing.T, shards int32) *liveStream {
	t.Helper()
	ls := &liveStream{kc: emulator.Kinesis(t), name: emulator.UniqueName("imported"), seqs: map[string][]string{}, ids: map[string][]string{}}
	require.NoError(t, emulator.CreateStream(t.Context(), ls.kc, ls.name, shards))
	ls.list(t)
	return ls
}

func (ls *liveStream) list(t *testing.T) {
	t.Helper()
	out, err := ls.kc.ListShards(t.Context(), &kinesis.ListShardsInput{StreamName: aws.String(ls.name)})
	require.NoError(t, err)
	ls.shards = map[string]kintypes.Shard{}
	for _, s := range out.Shards {
		ls.shards[aws.ToString(s.ShardId)] = s
	}
}

// put writes n records into shard (by its starting hash key).
func (ls *liveStream) put(t *testing.T, shard string, n int) {
	t.Helper()
	for range n {
		id := fmt.Sprintf("rec-%04d", ls.n)
		ls.n++
		out, err := ls.kc.PutRecord(t.Context(), &kinesis.PutRecordInput{StreamName: aws.String(ls.name), Data: []byte(id),
			PartitionKey: aws.String(id), ExplicitHashKey: ls.shards[shard].HashKeyRange.StartingHashKey})
		require.NoError(t, err)
		require.Equal(t, shard, aws.ToString(out.ShardId))
		ls.seqs[shard] = append(ls.seqs[shard], aws.ToString(out.SequenceNumber))
		ls.ids[shard] = append(ls.ids[shard], id)
	}
}

// split splits shard in the middle of its hash key range.
func (ls *liveStream) split(t *testing.T, shard string) {
	t.Helper()
	r := ls.shards[shard].HashKeyRange
	lo, _ := new(big.Int).SetString(aws.ToString(r.StartingHashKey), 10)
	hi, _ := new(big.Int).SetString(aws.ToString(r.EndingHashKey), 10)
	mid := new(big.Int).Rsh(new(big.Int).Add(lo, hi), 1)
	before := len(ls.shards)
	var err error
	waitFor(t, 10*time.Second, "split of "+shard, func() bool {
		_, err = ls.kc.SplitShard(t.Context(), &kinesis.SplitShardInput{StreamName: aws.String(ls.name), ShardToSplit: aws.String(shard),
			NewStartingHashKey: aws.String(mid.String())})
		var inUse *kintypes.ResourceInUseException
		return !errors.As(err, &inUse) // the stream is still updating from the last split
	})
	require.NoError(t, err)
	waitFor(t, 10*time.Second, "children of "+shard, func() bool {
		ls.list(t)
		return len(ls.shards) == before+2
	})
}

// TestImportEndToEnd imports, in each of the three layouts, a table holding
// checkpoints of a fresh stream, and runs a consumer on the result: on
// every shard it hands exactly the records after the imported checkpoint,
// none from a finished shard, a shard without progress from its first
// record once its parent is finished (even with the initial position
// LATEST), and the children of a parent only after the parent's last
// record.
func TestImportEndToEnd(t *testing.T) {
	t.Parallel()
	for _, layout := range importLayouts {
		t.Run(string(layout.format), func(t *testing.T) {
			ctx := t.Context()
			ls := newLiveStream(t, 3)
			for _, s := range []int{0, 1, 2} {
				ls.put(t, shardID(s), 6)
			}
			ls.split(t, shardID(1)) // children 3 and 4
			ls.split(t, shardID(2)) // children 5 and 6
			for _, s := range []int{0, 3, 4, 5, 6} {
				ls.put(t, shardID(s), 4)
			}
			for _, s := range []int{3, 4, 5, 6} {
				require.NotNil(t, ls.shards[shardID(s)].ParentShardId)
			}

			source := map[string]string{
				shardID(0): ls.seqs[shardID(0)][2], // resumes at record 3
				shardID(1): shardlease.ShardEnd,    // finished: nothing of it is read
				shardID(2): ls.seqs[shardID(2)][3], // resumes at record 4, before its children
				shardID(3): ls.seqs[shardID(3)][1], // resumes at record 2
				shardID(5): "",                     // no progress: read from its start after shard 2
				// 4 and 6 are not in the source: read from their start after their parent.
			}
			parents := map[string][]string{shardID(3): {shardID(1)}, shardID(5): {shardID(2)}}
			want := map[string][]string{
				shardID(0): ls.ids[shardID(0)][3:],
				shardID(2): ls.ids[shardID(2)][4:],
				shardID(3): ls.ids[shardID(3)][2:],
				shardID(4): ls.ids[shardID(4)],
				shardID(5): ls.ids[shardID(5)],
				shardID(6): ls.ids[shardID(6)],
			}
			total := 0
			for _, ids := range want {
				total += len(ids)
			}

			raw, table := dynamoTable(t)
			from := layout.putRows(t, raw, source, parents)
			store := newStore(t, raw, table)
			rep, err := shardlease.Import(ctx, raw, ls.kc, layout.format, from, store, ls.name)
			require.NoError(t, err)
			require.Equal(t, 4, rep.Copied)
			require.Equal(t, 1, rep.Skipped)
			require.Equal(t, 2, rep.NotInSource)

			var mu sync.Mutex
			var order []string           // shard of each record, in handling order
			got := map[string][]string{} // shard → record ids in handling order
			handler := func(_ context.Context, b *shardlease.Batch) error {
				mu.Lock()
				defer mu.Unlock()
				for _, r := range b.Records {
					got[b.ShardID] = append(got[b.ShardID], string(r.Data))
					order = append(order, b.ShardID)
				}
				return nil
			}
			w := &world{name: "emulator", kin: ls.kc, store: store, stream: ls.name,
				lease: 2 * time.Second, renew: 2 * time.Second / 3, take: 300 * time.Millisecond, idle: 50 * time.Millisecond}
			wk := startWorker(t, w, ls.kc, store, handler, w.opts("importer", shardlease.WithInitialPosition(shardlease.Latest))...)
			handledAll := func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(order) >= total
			}
			waitFor(t, time.Minute, fmt.Sprintf("%d records handled", total), handledAll)
			require.NoError(t, wk.stop(t))

			mu.Lock()
			defer mu.Unlock()
			require.Equal(t, want, got, "on every shard, exactly the records after the imported checkpoint")
			lastParent, firstChild := -1, len(order)
			for i, s := range order {
				switch s {
				case shardID(2):
					lastParent = i
				case shardID(5), shardID(6):
					firstChild = min(firstChild, i)
				}
			}
			require.Less(t, lastParent, firstChild, "the children of shard 2 are handed after its last record")
		})
	}
}

// TestImportWrongStream: rows of one stream imported for another stream
// stop the import before anything is written, whether the shard ids exist
// there or not; WithImportForce skips rows of unlisted shards only.
func TestImportWrongStream(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	// The other stream is older, so that the rows' sequence numbers fall
	// in its shards' ranges and only Kinesis can tell they are not its own.
	// kinesalite tells a stream's sequence numbers apart by its creation
	// time in whole seconds (Kinesis, by more), so the second stream is
	// created in a later second.
	other := newLiveStream(t, 3)
	created := time.Now().Unix()
	waitFor(t, 5*time.Second, "the next second", func() bool { return time.Now().Unix() > created })
	ls := newLiveStream(t, 2)
	ls.put(t, shardID(0), 3)
	ls.put(t, shardID(1), 3)
	raw, table := dynamoTable(t)
	from := importLayouts[0].putRows(t, raw, map[string]string{
		shardID(0): ls.seqs[shardID(0)][1],
		shardID(1): ls.seqs[shardID(1)][2],
		shardID(7): shardlease.ShardEnd, // a shard that aged out of the stream long ago
	}, nil)
	counting := &countingDynamo{DynamoDBAPI: raw}
	store := newStore(t, counting, table)

	for _, opts := range [][]shardlease.ImportOption{nil, {shardlease.WithImportForce()}} {
		_, err := shardlease.Import(ctx, raw, other.kc, shardlease.ImportKinsumer, from, store, other.name, opts...)
		require.ErrorIs(t, err, shardlease.ErrImportWrongStream)
		var mismatch *shardlease.ImportMismatchError
		require.ErrorAs(t, err, &mismatch)
		if opts == nil {
			require.Equal(t, []string{shardID(7)}, mismatch.Unlisted)
		} else {
			require.Empty(t, mismatch.Unlisted, "force skips the unlisted shard")
		}
		require.Len(t, mismatch.Rejected, 2)
		for _, r := range mismatch.Rejected {
			require.Contains(t, r.Problem, "did not come from this stream", "Kinesis says so")
		}
		require.ErrorContains(t, err, "shardlease: import kinsumer table "+from+" into stream "+other.name+": nothing was written")
		require.NotContains(t, err.Error(), "WithImportForce", "force does not help with rejected checkpoints")
	}
	require.Zero(t, counting.Writes(), "nothing was written")
	rows, err := store.List(ctx, other.name)
	require.NoError(t, err)
	require.Empty(t, rows)

	// The right stream: shard 7 is what stops it, and force skips it.
	_, err = shardlease.Import(ctx, raw, ls.kc, shardlease.ImportKinsumer, from, store, ls.name)
	require.ErrorIs(t, err, shardlease.ErrImportWrongStream)
	require.ErrorContains(t, err, "the stream does not list 1 of their shards (shardId-000000000007)")
	require.ErrorContains(t, err, "import with WithImportForce (the CLI's -force) to skip them")
	require.Zero(t, counting.Writes())
	rep, err := shardlease.Import(ctx, raw, ls.kc, shardlease.ImportKinsumer, from, store, ls.name, shardlease.WithImportForce())
	require.NoError(t, err)
	require.Equal(t, 2, rep.Copied)
	require.Equal(t, shardlease.ImportResult{Shard: shardID(7), Checkpoint: shardlease.ShardEnd, Action: shardlease.ImportSkipped,
		Reason: "stream " + ls.name + " does not list this shard (closed and aged out of its retention, imported with force): nothing to read"}, rep.Results[2])
	requireImported(t, store, ls.name, map[string]importedRow{
		shardID(0): {checkpoint: ls.seqs[shardID(0)][1]},
		shardID(1): {checkpoint: ls.seqs[shardID(1)][2]},
	})
}
