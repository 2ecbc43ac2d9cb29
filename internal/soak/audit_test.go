package soak

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/internal/emulator"
)

// lateReply applies every UpdateItem on the server and, while late is set,
// answers those on lease rows with the deadline error its caller sees when
// the server applies a write after the caller's deadline has passed (a
// loaded machine). The fence floor reservation before an acquire answers in
// time.
type lateReply struct {
	shardlease.DynamoDBAPI
	late bool
}

func (l *lateReply) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	out, err := l.DynamoDBAPI.UpdateItem(ctx, in, o...)
	if l.late && err == nil && !strings.HasSuffix(avString(in.Key["lease_key"]), ":#fence") {
		return nil, context.DeadlineExceeded
	}
	return out, err
}

// An acquire the server applied after the worker's deadline is known to the
// worker only through a later listing; the worker releases that row (it does
// not run it) under the counter the listing showed. That release is the
// holder's own write, and the audit must know the counter from the listing
// too: before the audit recorded listings, it reported this release as a
// stale write accepted (the row's owner at that counter unknown), as one soak
// run on a loaded machine did.
func TestAuditKnowsCountersLearntFromListings(t *testing.T) {
	ctx := t.Context()
	client := emulator.Dynamo(t)
	table := emulator.UniqueName("audit")
	if err := shardlease.CreateTable(ctx, client, table); err != nil {
		t.Fatal(err)
	}
	a := newAuditor(2 * time.Second)
	late := &lateReply{DynamoDBAPI: client}
	store, err := shardlease.NewDynamoStore(&auditDynamo{DynamoDBAPI: late, a: a, by: "w0-1"}, table)
	if err != nil {
		t.Fatal(err)
	}
	key := shardlease.LeaseKey{Stream: "orders", Shard: "shardId-000000000000"}
	if _, err := store.Create(ctx, key, nil); err != nil {
		t.Fatal(err)
	}
	me := shardlease.NewOwnerIdentity("w0")
	free := listOne(t, store, key)

	late.late = true
	if _, err := store.Acquire(ctx, key, me, free.Counter); err == nil {
		t.Fatal("the acquire answered late returned no error")
	}
	late.late = false

	mine := listOne(t, store, key)
	if mine.Owner != me || mine.Counter <= free.Counter {
		t.Fatalf("the late acquire did not land: row has owner %q counter %d", mine.Owner, mine.Counter)
	}
	if _, err := store.Release(ctx, mine); err != nil {
		t.Fatal(err)
	}

	checked, stale, examples := a.fencing(false)
	if checked != 1 || stale != 0 {
		t.Fatalf("audited %d writes, %d stale: %v", checked, stale, examples)
	}
}

// listOne lists the stream and returns key's row.
func listOne(t *testing.T, store shardlease.LeaseStore, key shardlease.LeaseKey) shardlease.Lease {
	t.Helper()
	leases, err := store.List(t.Context(), key.Stream)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range leases {
		if l.Key == key {
			return l
		}
	}
	t.Fatalf("no row %s in the listing", key)
	return shardlease.Lease{}
}

// The fenced sink's figures are judged by the holdings the table's accepted
// acquires order, not by the tokens: a worker that knows the stream's
// creation time and one that does not make tokens whose order can run
// against the table's. Here the earlier holding's token leads with the
// stream's creation time and the later one's with zero, as the issue's
// run showed: the later holder writes, the paused earlier holder's write is
// accepted after it (a stale write accepted, although its token is the
// greater), and the later holder, the latest holding of the row, is then
// refused (the live holder refused).
func TestAuditJudgesTheSinkByTheTablesOrder(t *testing.T) {
	ctx := t.Context()
	a := newAuditor(2 * time.Second)
	mem := shardlease.NewMemoryStore()
	mem.OnWrite(a.onWrite)
	key := shardlease.LeaseKey{Stream: "orders", Shard: "shardId-000000000000"}
	if _, err := mem.Create(ctx, key, nil); err != nil {
		t.Fatal(err)
	}
	early, late := shardlease.NewOwnerIdentity("w0"), shardlease.NewOwnerIdentity("w1")
	first, err := (&auditStore{LeaseStore: mem, WorkerStore: mem, a: a, by: "w0-1"}).Acquire(ctx, key, early, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The later holder takes the lease over on the counter it saw.
	second, err := (&auditStore{LeaseStore: mem, WorkerStore: mem, a: a, by: "w1-1"}).Acquire(ctx, key, late, first.Counter)
	if err != nil {
		t.Fatal(err)
	}
	h1, latest1 := a.holding(key.String(), early, first.Counter)
	h2, latest2 := a.holding(key.String(), late, second.Counter)
	if h1 == noHolding || h2 <= h1 || latest1 || !latest2 {
		t.Fatalf("holdings #%d (latest %v) then #%d (latest %v); want the second after the first, and the latest", h1, latest1, h2, latest2)
	}

	st := &sinkState{}
	sink := newMemorySink(st)
	tok := func(value string) shardlease.FenceToken {
		f, err := shardlease.ParseFenceToken(key.String(), value)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	knows := tok(fmt.Sprintf("000000dc6acfac00.%016x", first.Counter))
	blind := tok(fmt.Sprintf("0000000000000000.%016x", second.Counter))
	rec := func(id string) []shardlease.Record {
		return []shardlease.Record{{Data: []byte(id), PartitionKey: "k", SequenceNumber: id}}
	}
	if err := sink.apply(ctx, nil, blind, h2, rec("1")); err != nil {
		t.Fatal(err)
	}
	if err := sink.apply(ctx, nil, knows, h1, rec("2")); err != nil {
		t.Fatalf("the paused earlier holder's write: %v; its token compares above, so the sink accepts it", err)
	}
	err = sink.apply(ctx, nil, blind, h2, rec("3"))
	if !errors.Is(err, errFenced) || !a.stillLatest(key.String(), h2) {
		t.Fatalf("the later holding's write: %v, latest %v; want it refused while it is the latest (the live holder refused)", err, a.stillLatest(key.String(), h2))
	}
	_, stale, _ := sink.audit(ctx)
	if len(stale) != 1 {
		t.Fatalf("stale writes %v; want the earlier holding's write after the later one's", stale)
	}
}

// A row deleted and made again may count from zero again (a Group's
// DeleteRemovedAfter, an operator's delete): the audit keys counters by the
// row's generation, so a holder's writes in the new row are not judged
// against the old row's owners.
func TestAuditKnowsRowsMadeAgain(t *testing.T) {
	ctx := t.Context()
	a := newAuditor(2 * time.Second)
	mem := shardlease.NewMemoryStore()
	mem.OnWrite(a.onWrite)
	key := shardlease.LeaseKey{Stream: "orders", Shard: "shardId-000000000000"}
	for i, owner := range []string{shardlease.NewOwnerIdentity("w0"), shardlease.NewOwnerIdentity("w1")} {
		store := &auditStore{LeaseStore: mem, WorkerStore: mem, a: a, by: fmt.Sprintf("w%d-1", i)}
		if _, err := store.Create(ctx, key, nil); err != nil {
			t.Fatal(err)
		}
		l, err := store.Acquire(ctx, key, owner, 0)
		if err != nil {
			t.Fatal(err)
		}
		if l, err = store.Checkpoint(ctx, l, fmt.Sprintf("%d", 100-i), 0, time.Now()); err != nil {
			t.Fatal(err)
		}
		if _, err := store.Release(ctx, l); err != nil {
			t.Fatal(err)
		}
		a.deleted(key.String())
		mem.Delete(key)
	}
	if checked, stale, examples := a.fencing(true); checked != 4 || stale != 0 {
		t.Fatalf("audited %d writes, %d stale: %v", checked, stale, examples)
	}
	if n, examples := a.regressions(); n != 0 {
		t.Fatalf("%d checkpoints moved backwards: %v", n, examples)
	}
}

// An operator's tool that takes a row from its holder with handover
// (rewind, reset) leaves it held for the holder's lease duration, and the
// holder may hand batches until its cut-off: the audit must name that
// holder as the one the tool took the row from, even when the holder's
// last write is recorded after the tool's acquire (writes are recorded as
// their calls return), through a handoff another worker asks of the tool
// meanwhile, and when a second tool takes the row from the first.
func TestAuditKnowsWhoAToolTookTheRowFrom(t *testing.T) {
	a := newAuditor(2 * time.Second)
	key := "orders:shardId-000000000000"
	holder, tool := shardlease.NewOwnerIdentity("w0"), shardlease.NewOwnerIdentity("soak-rewind")
	a.record(write{key: key, op: "release", by: "w2-1", claimOwner: "w2", claimCtr: 3, counter: 4})
	a.record(write{key: key, op: "acquire", by: operator, claimCtr: -1, owner: tool, counter: 9})
	a.record(write{key: key, op: "acquire", by: "w0-1", claimCtr: -1, owner: holder, counter: 5}) // landed first
	a.record(write{key: key, op: "renew", by: operator, claimOwner: tool, claimCtr: 9, owner: tool, counter: 10})
	a.record(write{key: key, op: "handoff", by: "w1-1", claimCtr: -1, owner: tool, handoffTo: "w1", counter: 10})
	owner, _, from, at := a.holder(key)
	if owner != tool || from != holder || at.IsZero() {
		t.Fatalf("row held by %q, taken from %q at %v; want the tool, taken from %q", owner, from, at, holder)
	}
	second := shardlease.NewOwnerIdentity("soak-reset")
	a.record(write{key: key, op: "acquire", by: operator, claimCtr: -1, owner: second, counter: 12})
	a.record(write{key: key, op: "renew", by: operator, claimOwner: tool, claimCtr: 10, owner: tool, counter: 11}) // landed first
	if owner, _, from2, at2 := a.holder(key); owner != second || from2 != holder || !at2.Equal(at) {
		t.Fatalf("row held by %q, taken from %q at %v; want the second tool, taken from %q at %v", owner, from2, at2, holder, at)
	}
	a.record(write{key: key, op: "acquire", by: "w1-1", claimCtr: -1, owner: "w1", counter: 13})
	if _, _, from, at := a.holder(key); from != "" || !at.IsZero() {
		t.Fatalf("a worker's acquire after the tool's: taken from %q at %v; want none", from, at)
	}
}

// A listing that shows the tool's acquire before the acquire's call
// returned (an observation recorded first) still lets the acquire's record
// name the holder the tool took the row from.
func TestAuditKnowsWhoAToolTookTheRowFromWhenAListingSawItFirst(t *testing.T) {
	a := newAuditor(2 * time.Second)
	key := "orders:shardId-000000000000"
	holder, tool := shardlease.NewOwnerIdentity("w0"), shardlease.NewOwnerIdentity("soak-rewind")
	a.record(write{key: key, op: "acquire", by: "w0-1", claimCtr: -1, owner: holder, counter: 15})
	a.record(write{key: key, op: "observed", by: "w3-1", claimCtr: -1, owner: tool, counter: 16})
	a.record(write{key: key, op: "acquire", by: operator, claimCtr: -1, owner: tool, counter: 16})
	if owner, _, from, at := a.holder(key); owner != tool || from != holder || at.IsZero() {
		t.Fatalf("row held by %q, taken from %q at %v; want the tool, taken from %q", owner, from, at, holder)
	}
}
