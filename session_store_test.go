package shardlease_test

// What the conformance suite cannot see of the stores' sessions: how the
// DynamoStore encodes them (and so how a release from before sessions reads
// its rows), how it refuses corrupt ones, what one keep costs, and what the
// MemoryStore reports to its OnWrite hook.

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/internal/dyncount"
)

// sessionTable is a DynamoStore over a fresh table, the client it calls
// (counting, with consumed capacity) and the table's name.
func sessionTable(t *testing.T) (*shardlease.DynamoStore, *dyncount.Client, string) {
	t.Helper()
	client, table := dynamoTable(t)
	counted := &dyncount.Client{DynamoDBAPI: client, Capacity: true}
	store, err := shardlease.NewDynamoStore(counted, table)
	require.NoError(t, err)
	return store, counted, table
}

// openBesideARow creates the lease row "orders:shardId-000000000000" in
// store and opens worker "a"'s session on that stream; the context it
// returns carries a holder lease duration of 20 s.
func openBesideARow(t *testing.T, store interface {
	shardlease.LeaseStore
	shardlease.SessionStore
}) (context.Context, shardlease.LeaseKey, shardlease.Worker) {
	t.Helper()
	ctx := shardlease.WithHolderLeaseDuration(t.Context(), 20*time.Second)
	k := shardlease.LeaseKey{Stream: "orders", Shard: "shardId-000000000000"}
	_, err := store.Create(ctx, k, nil)
	require.NoError(t, err)
	w, err := store.OpenSession(ctx, k.Stream, "a")
	require.NoError(t, err)
	return ctx, k, w
}

// durationType is the type of lease_duration on item: "S", "N" or "" when
// absent.
func durationType(item map[string]types.AttributeValue) string {
	switch item["lease_duration"].(type) {
	case *types.AttributeValueMemberS:
		return "S"
	case *types.AttributeValueMemberN:
		return "N"
	case nil:
		return ""
	}
	return "?"
}

// TestSessionStoreKeptRowEncoding: a row a session keeps carries
// lease_duration as the string "session:<the holder's ms>" through every write of its
// holder (a release from before sessions decodes lease_duration as a
// number and so refuses the row: it never takes it), and a number again, or
// none, once Release or a plain Acquire cleared the record.
func TestSessionStoreKeptRowEncoding(t *testing.T) {
	t.Parallel()
	store, client, table := sessionTable(t)
	ctx, k, w := openBesideARow(t, store)

	worker := rawItem(t, client, table, w.Key())
	assert.Equal(t, "N", durationType(worker), "the worker row's lease_duration is a number (ms)")
	assert.Equal(t, &types.AttributeValueMemberN{Value: "20000"}, worker["lease_duration"])
	assert.Equal(t, &types.AttributeValueMemberN{Value: fmt.Sprint(w.Gen)}, worker["session_gen"])

	l, err := store.AcquireInSession(ctx, k, w, 0)
	require.NoError(t, err)
	assertKeptItem := func(what string) {
		t.Helper()
		item := rawItem(t, client, table, k.String())
		assert.Equal(t, &types.AttributeValueMemberS{Value: "session:20000"}, item["lease_duration"], "%s: lease_duration is the string \"session:<holder's ms>\"", what)
		assert.Equal(t, &types.AttributeValueMemberS{Value: w.Key()}, item["lease_session"], what)
		assert.Equal(t, &types.AttributeValueMemberN{Value: fmt.Sprint(w.Gen)}, item["session_gen"], what)
	}
	assertKeptItem("acquire in session")
	l, err = store.Renew(ctx, l, time.Now())
	require.NoError(t, err)
	assertKeptItem("renew with a duration")
	l, err = store.Checkpoint(ctx, l, "100", -1, time.Now())
	require.NoError(t, err)
	assertKeptItem("checkpoint with a duration")
	l, err = store.RewindRow(ctx, l, "", shardlease.Start{})
	require.NoError(t, err)
	assertKeptItem("rewind")

	_, err = store.Release(ctx, l)
	require.NoError(t, err)
	item := rawItem(t, client, table, k.String())
	assert.Empty(t, durationType(item), "a release removes the \"session\" of a kept row")
	assert.NotContains(t, item, "lease_session")
	assert.NotContains(t, item, "session_gen")

	l, err = store.AcquireInSession(ctx, k, w, 0)
	require.NoError(t, err)
	_, err = store.Acquire(ctx, k, "b", l.Counter)
	require.NoError(t, err)
	item = rawItem(t, client, table, k.String())
	assert.Equal(t, &types.AttributeValueMemberN{Value: "20000"}, item["lease_duration"], "a plain acquire writes the number again")
	assert.NotContains(t, item, "lease_session")
	assert.NotContains(t, item, "session_gen")
}

// TestSessionStoreWriteWithoutTheRecordRefused: a holder's write whose
// handle does not show the row's session record (a handle made by hand)
// would put a number in lease_duration, which lets a release from before
// sessions take the row; the store refuses it and the row keeps its
// "session".
func TestSessionStoreWriteWithoutTheRecordRefused(t *testing.T) {
	t.Parallel()
	store, client, table := sessionTable(t)
	ctx, k, w := openBesideARow(t, store)
	l, err := store.AcquireInSession(ctx, k, w, 0)
	require.NoError(t, err)
	bare := l
	bare.Session, bare.SessionGen = "", 0
	_, err = store.Renew(ctx, bare, time.Now())
	require.ErrorIs(t, err, shardlease.ErrInvalidConfig)
	assert.Contains(t, err.Error(), w.Key(), "the error names the session")
	assert.Contains(t, err.Error(), table)
	item := rawItem(t, client, table, k.String())
	assert.Equal(t, &types.AttributeValueMemberS{Value: "session:20000"}, item["lease_duration"])
	_, err = store.Renew(ctx, l, time.Now())
	require.NoError(t, err, "the holder's own handle still holds")
}

// putRaw writes item into table as it is.
func putRaw(t *testing.T, client shardlease.DynamoDBAPI, table string, item map[string]types.AttributeValue) {
	t.Helper()
	_, err := client.PutItem(t.Context(), &dynamodb.PutItemInput{TableName: aws.String(table), Item: item})
	require.NoError(t, err)
}

// TestSessionStoreCorruptSessionAttribute: a lease row whose session
// record cannot be read, or whose lease_duration is a string other than
// "session", is an ErrCorruptLease error naming the row and the attribute;
// so is a worker row whose session cannot be read, from ReadSession and in
// a listing's CorruptRowsError.
func TestSessionStoreCorruptSessionAttribute(t *testing.T) {
	t.Parallel()
	store, client, table := sessionTable(t)
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	n := func(v string) types.AttributeValue { return &types.AttributeValueMemberN{Value: v} }
	for i, tc := range []struct {
		attrs map[string]types.AttributeValue
		names string
	}{
		{map[string]types.AttributeValue{"lease_duration": s("sessions")}, "lease_duration"},
		{map[string]types.AttributeValue{"lease_duration": s("20000")}, "lease_duration"},
		{map[string]types.AttributeValue{"lease_session": n("7"), "session_gen": n("7")}, "lease_session"},
		{map[string]types.AttributeValue{"lease_session": s("orders:a"), "session_gen": n("7")}, "lease_session"},
		{map[string]types.AttributeValue{"lease_session": s("orders:@a")}, "session_gen"},
		{map[string]types.AttributeValue{"lease_session": s("orders:@a"), "session_gen": s("7")}, "session_gen"},
		{map[string]types.AttributeValue{"session_gen": n("7")}, "lease_session"},
	} {
		k := shardlease.LeaseKey{Stream: "orders", Shard: fmt.Sprintf("shardId-%012d", i)}
		item := map[string]types.AttributeValue{"lease_key": s(k.String()), "lease_counter": n("3"), "lease_owner": s("a")}
		for a, v := range tc.attrs {
			item[a] = v
		}
		putRaw(t, client, table, item)
		_, err := store.Get(t.Context(), k)
		require.ErrorIs(t, err, shardlease.ErrCorruptLease, "case %d", i)
		assert.Contains(t, err.Error(), k.String(), "case %d names the row", i)
		assert.Contains(t, err.Error(), tc.names, "case %d names the attribute", i)
	}

	worker := map[string]types.AttributeValue{"lease_key": s("orders:@w"), "lease_counter": n("3"), "lease_owner": s("w"), "session_gen": s("x")}
	putRaw(t, client, table, worker)
	_, err := store.ReadSession(t.Context(), "orders", "w")
	require.ErrorIs(t, err, shardlease.ErrCorruptLease)
	assert.Contains(t, err.Error(), "orders:@w")
	assert.Contains(t, err.Error(), "session_gen")
	_, _, err = store.ListWithWorkers(t.Context(), "orders")
	var rows *shardlease.CorruptRowsError
	require.ErrorAs(t, err, &rows)
	var keys []string
	for _, r := range rows.Rows {
		keys = append(keys, r.Key)
	}
	assert.Contains(t, keys, "orders:@w", "the listing names the worker row")
}

// TestSessionStoreKeepIsOneWriteUnit: one KeepSession is one UpdateItem of
// one write capacity unit, whatever the number of leases the session
// keeps, with its mail; a lease taken in session costs what Acquire costs,
// and every other session operation is one call.
func TestSessionStoreKeepIsOneWriteUnit(t *testing.T) {
	t.Parallel()
	store, client, _ := sessionTable(t)
	ctx := shardlease.WithHolderLeaseDuration(t.Context(), 20*time.Second)
	const leases = 20
	k0 := shardlease.LeaseKey{Stream: "orders", Shard: "shardId-000000000000"}
	w, err := store.OpenSession(ctx, "orders", "a")
	require.NoError(t, err)
	for i := range leases {
		k := shardlease.LeaseKey{Stream: "orders", Shard: fmt.Sprintf("shardId-%012d", i)}
		_, err := store.Create(ctx, k, nil)
		require.NoError(t, err)
		before, beforeUnits := client.Writes(), client.WriteUnits()
		_, err = store.AcquireInSession(ctx, k, w, 0)
		require.NoError(t, err)
		if i == 0 {
			inSession, inSessionUnits := client.Writes()-before, client.WriteUnits()-beforeUnits
			plain := shardlease.LeaseKey{Stream: "orders-plain", Shard: k.Shard}
			_, err := store.Create(ctx, plain, nil)
			require.NoError(t, err)
			before, beforeUnits = client.Writes(), client.WriteUnits()
			_, err = store.Acquire(ctx, plain, "a", 0)
			require.NoError(t, err)
			assert.Equal(t, client.Writes()-before, inSession, "a lease taken in session costs the writes of Acquire")
			assert.Equal(t, client.WriteUnits()-beforeUnits, inSessionUnits, "and its write units")
			t.Logf("AcquireInSession: %d writes, %.1f write units; Acquire: %d writes, %.1f write units", inSession, inSessionUnits, client.Writes()-before, client.WriteUnits()-beforeUnits)
		}
		if i < 3 {
			_, err = store.MailSession(ctx, w, k)
			require.NoError(t, err)
		}
	}
	writes, updates, units, reads := client.Writes(), client.Count(dyncount.OpUpdateItem), client.WriteUnits(), client.Reads()
	kept, mail, err := store.KeepSession(ctx, w)
	require.NoError(t, err)
	assert.Len(t, mail, 3)
	assert.Equal(t, w.Counter+1, kept.Counter)
	assert.Equal(t, int64(1), client.Writes()-writes, "one write keeps %d leases", leases)
	assert.Equal(t, int64(1), client.Count(dyncount.OpUpdateItem)-updates)
	assert.Equal(t, reads, client.Reads(), "a keep reads nothing")
	got := client.WriteUnits() - units
	t.Logf("one KeepSession keeping %d leases, with 3 keys of mail: %d call, %.1f write units", leases, client.Writes()-writes, got)
	if got > 0 { // the emulator reports consumed capacity
		assert.Equal(t, 1.0, got, "a keep of a small row is one write unit")
	}
	units = client.WriteUnits()
	_, _, err = store.KeepSession(ctx, kept)
	require.NoError(t, err)
	assert.Equal(t, reads, client.Reads(), "a keep reads nothing")
	if got := client.WriteUnits() - units; got > 0 {
		assert.Equal(t, 1.0, got, "a keep without mail is one write unit too")
	}

	// Each other session operation is one call too, on the session of b
	// as the previous one left it.
	var b shardlease.Worker
	for _, op := range []struct {
		name string
		call func() error
	}{
		{"OpenSession", func() (err error) { b, err = store.OpenSession(ctx, "orders", "b"); return err }},
		{"ReadSession", func() (err error) { b, err = store.ReadSession(ctx, "orders", "b"); return err }},
		{"MailSession", func() (err error) { _, err = store.MailSession(ctx, b, k0); return err }},
		{"FenceSession", func() error {
			ended, err := store.FenceSession(ctx, b)
			assert.True(t, ended)
			return err
		}},
	} {
		calls, units, rUnits := client.Calls(), client.WriteUnits(), client.ReadUnits()
		require.NoError(t, op.call(), op.name)
		assert.Equal(t, int64(1), client.Calls()-calls, "%s is one call", op.name)
		t.Logf("%s: 1 call, %.1f write units, %.1f read units", op.name, client.WriteUnits()-units, client.ReadUnits()-rUnits)
	}
}

// TestSessionStoreMemoryOnWriteReportsSessions: the MemoryStore's OnWrite
// hook sees a lease taken in session as an "acquire" whose row names the
// session, and the session writes to the worker row under its key, so that
// an audit can check that a fence came before a claim.
func TestSessionStoreMemoryOnWriteReportsSessions(t *testing.T) {
	t.Parallel()
	ctx := shardlease.WithHolderLeaseDuration(context.Background(), 20*time.Second)
	m := shardlease.NewMemoryStore()
	type event struct {
		op, key string
		before  int64
		after   int64
		gen     int64
	}
	var events []event
	m.OnWrite(func(op string, before, after shardlease.Lease) {
		events = append(events, event{op: op, key: after.Key.String(), before: before.Counter, after: after.Counter, gen: after.SessionGen})
	})
	k := shardlease.LeaseKey{Stream: "orders", Shard: "shardId-000000000000"}
	_, err := m.Create(ctx, k, nil)
	require.NoError(t, err)
	w, err := m.OpenSession(ctx, "orders", "a")
	require.NoError(t, err)
	l, err := m.AcquireInSession(ctx, k, w, 0)
	require.NoError(t, err)
	_, err = m.MailSession(ctx, w, k)
	require.NoError(t, err)
	kept, _, err := m.KeepSession(ctx, w)
	require.NoError(t, err)
	_, err = m.FenceSession(ctx, kept)
	require.NoError(t, err)
	_, err = m.Heartbeat(ctx, "orders", "b")
	require.NoError(t, err)
	assert.Equal(t, []event{
		{op: "create", key: k.String()},
		{op: "open session", key: "orders:@a", after: 1, gen: w.Gen},
		{op: "acquire", key: k.String(), after: l.Counter, gen: w.Gen},
		{op: "mail session", key: "orders:@a", before: 1, after: 1, gen: w.Gen},
		{op: "keep session", key: "orders:@a", before: 1, after: 2, gen: w.Gen},
		{op: "fence session", key: "orders:@a", before: 2},
	}, events, "a heartbeat is not reported; a fenced row after is the zero lease of its key")
}

// TestSessionStoreResetEndsTheKeepingSession: a forced reset (the CLI's
// reset -force) of a lease a session keeps ends that session before it
// takes the row, since the holder never writes to the row and would read on
// beside the next holder; the row is left held for the session's lease
// duration, its record cleared, and the holder's keeps fail from the fence
// on. In both stores.
func TestSessionStoreResetEndsTheKeepingSession(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"memory", "dynamo"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var store interface {
				shardlease.LeaseStore
				shardlease.SessionStore
			} = shardlease.NewMemoryStore()
			if name == "dynamo" {
				store, _, _ = sessionTable(t)
			}
			ctx, k, w := openBesideARow(t, store)
			l, err := store.AcquireInSession(ctx, k, w, 0)
			require.NoError(t, err)
			l, err = store.Checkpoint(ctx, l, "100", -1, time.Now())
			require.NoError(t, err)

			rep, err := shardlease.ResetCheckpoint(t.Context(), store, k, "50", shardlease.WithResetHandover(), shardlease.WithResetOwner("tool"))
			require.NoError(t, err)
			assert.Equal(t, "a", rep.TakenFrom)
			assert.Equal(t, 20*time.Second, rep.ResumeAfter, "the row is left held for the session's lease duration")
			_, _, err = store.KeepSession(ctx, w)
			require.ErrorIs(t, err, shardlease.ErrLeaseLost, "the holder's session ended before the take")
			got, err := store.Get(t.Context(), k)
			require.NoError(t, err)
			assert.Equal(t, "tool", got.Owner)
			assert.Equal(t, "50", got.Checkpoint)
			assert.Empty(t, got.Session, "the tool's take cleared the record")
			assert.Equal(t, 20*time.Second, got.Duration)
			_, err = store.Checkpoint(ctx, l, "150", -1, time.Now())
			require.ErrorIs(t, err, shardlease.ErrLeaseLost)
		})
	}
}

// Lease.KeptBy names the session a row records, and nothing for a row its
// holder renews or one whose record lacks a generation.
func TestSessionStoreKeptByNamesTheSession(t *testing.T) {
	s, ok := shardlease.Lease{Session: "orders:@pod-0#a1b2c3d4e5f60718", SessionGen: 7}.KeptBy()
	require.True(t, ok)
	assert.Equal(t, shardlease.Worker{Stream: "orders", Owner: "pod-0#a1b2c3d4e5f60718", Gen: 7}, s)
	assert.Equal(t, "orders:@pod-0#a1b2c3d4e5f60718", s.Key())
	_, ok = shardlease.Lease{}.KeptBy()
	assert.False(t, ok, "renewed by its holder")
	_, ok = shardlease.Lease{Session: "orders:@pod-0", SessionGen: 0}.KeptBy()
	assert.False(t, ok, "no generation")
}
