package soak

import (
	"context"
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
