package soak

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	dynamotypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/internal/seqnum"
)

// write is one write the store accepted, as the store reported it: who
// claimed to hold the row (for renew, checkpoint and release) and the row
// after the write.
type write struct {
	key        string
	op         string // create, acquire, renew, checkpoint, release, handoff
	by         string // the writing worker incarnation
	claimOwner string // renew, checkpoint, release: the handle's owner
	claimCtr   int64  // ... and counter; -1 for other writes
	owner      string // row after the write
	handoffTo  string
	counter    int64
	checkpoint string
	at         time.Time // when the audit saw the store accept it
	gen        int       // the row's generation: how often it was deleted before
	// takenFrom is, while an operator's tool holds the row, the owner it
	// took the row from (with handover): the owner of the row's write just
	// below the tool's acquire (at counter takenCtr); takenAt is when.
	takenFrom string
	takenCtr  int64
	takenAt   time.Time
	// seenFrom is, on an observation that showed a new owner before the
	// write that made it was recorded (writes are recorded as their calls
	// return), the owner of the row's write below it, at counter
	// seenFromCtr: the write's record then knows whom it took the row from.
	seenFrom    string
	seenFromCtr int64
}

// auditor keeps the store's record of every accepted write, the writes it
// refused, and who holds each row now.
type auditor struct {
	lease time.Duration

	mu      sync.Mutex
	writes  []write
	refused map[string]int64 // by op: stale writes refused by the condition
	now     map[string]write // key → latest write (highest counter)
	maxSkew time.Duration    // largest |expiry written - (now + lease)|
	// hook is the fake world's MemoryStore.OnWrite record: key/counter →
	// the row before the write that produced that counter.
	hook map[string]shardlease.Lease
	// starts holds each row's holdings in the order they began; known
	// names every write recorded other than reads and handoff requests,
	// by row, generation and counter (holdings.go).
	starts map[string][]start
	known  map[string]bool
	// gens counts the deletions of each row: a row made again may start
	// its counter again, so the audit keys counters by generation too.
	gens map[string]int
	// sess checks the holders' writes the store accepted against the
	// sessions fenced (sessions.go).
	sess *sessionAudit
}

func newAuditor(lease time.Duration) *auditor {
	return &auditor{lease: lease, refused: map[string]int64{}, now: map[string]write{}, hook: map[string]shardlease.Lease{},
		starts: map[string][]start{}, known: map[string]bool{}, gens: map[string]int{}}
}

// hookKey names the write of a row's generation gen that produced counter.
func hookKey(key string, gen int, counter int64) string {
	return key + "#" + strconv.Itoa(gen) + "#" + strconv.FormatInt(counter, 10)
}

// deleted records that key's row was deleted: its next writes are of a new
// generation.
func (a *auditor) deleted(key string) {
	a.mu.Lock()
	a.gens[key]++
	a.mu.Unlock()
}

// onWrite is MemoryStore's OnWrite hook (fake world).
func (a *auditor) onWrite(op string, before, after shardlease.Lease) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if op == "request handoff" || op == "withdraw handoff" || op == "note" || isSpecialKey(after.Key.String()) {
		return // does not bump the counter, or no lease row
	}
	a.hook[hookKey(after.Key.String(), a.gens[after.Key.String()], after.Counter)] = before
}

// isSpecialKey reports whether key names a row that is no lease: a worker
// row ("stream:@owner"), or a row of the stream's own ("stream:#identity",
// the fence floor "stream:#fence"): the part after the colon starts with
// '@' or '#', which no shard id does.
func isSpecialKey(key string) bool {
	_, rest, ok := strings.Cut(key, ":")
	return !ok || strings.HasPrefix(rest, "@") || strings.HasPrefix(rest, "#")
}

func (a *auditor) record(w write) {
	if isSpecialKey(w.key) {
		return
	}
	w.at = time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	w.gen = a.gens[w.key]
	a.began(w)
	if w.op != "observed" && w.op != "handoff" {
		a.known[hookKey(w.key, w.gen, w.counter)] = true
	}
	cur, ok := a.now[w.key]
	if ok && cur.gen == w.gen {
		a.taken(&w, cur)
	}
	a.writes = append(a.writes, w)
	cur, ok = a.now[w.key]
	if !ok || w.gen > cur.gen || w.gen == cur.gen && (w.counter > cur.counter || w.counter == cur.counter && (w.op == "handoff" || cur.op == "observed" && w.op != "observed")) {
		if ok && w.op == "observed" && cur.gen == w.gen && cur.owner != w.owner {
			w.seenFrom, w.seenFromCtr = cur.owner, cur.counter
		}
		a.now[w.key] = w
	}
}

func (a *auditor) refuse(op string) {
	a.mu.Lock()
	a.refused[op]++
	a.mu.Unlock()
}

func (a *auditor) skew(expiry time.Time) {
	if expiry.IsZero() {
		return
	}
	d := expiry.Sub(time.Now().Add(a.lease))
	if d < 0 {
		d = -d
	}
	a.mu.Lock()
	a.maxSkew = max(a.maxSkew, d)
	a.mu.Unlock()
}

// taken keeps the owner an operator's tool took a row from, w being the
// write recorded and cur the row's latest write before it: the tool's later
// writes, the handoffs others ask of it and a second tool's take carry it
// on. Writes are
// recorded as their calls return, so the holder's last write may be
// recorded after the tool's acquire: the write with the highest counter
// below the acquire's wins. a.mu is held.
func (a *auditor) taken(w *write, cur write) {
	tool := !cur.takenAt.IsZero() // the tool holds the row
	switch {
	case w.by == operator && w.op == "acquire" && w.owner != cur.owner && cur.counter < w.counter && !tool:
		w.takenFrom, w.takenCtr, w.takenAt = cur.owner, cur.counter, w.at
	case w.by == operator && w.op == "acquire" && cur.op == "observed" && cur.owner == w.owner && cur.counter == w.counter && cur.seenFrom != "" && !tool:
		// A listing showed the tool's acquire before its call returned.
		w.takenFrom, w.takenCtr, w.takenAt = cur.seenFrom, cur.seenFromCtr, w.at
	case tool && (w.owner == cur.owner || w.by == operator && w.op == "acquire" && cur.counter < w.counter):
		// The tool's own writes, the handoffs asked of it, and another
		// tool taking the row from it: the holder that may still run is
		// the one the first tool took the row from.
		w.takenFrom, w.takenCtr, w.takenAt = cur.takenFrom, cur.takenCtr, cur.takenAt
	case tool && w.by != operator && w.op != "handoff" && w.counter < cur.counter && w.counter > cur.takenCtr:
		cur.takenFrom, cur.takenCtr = w.owner, w.counter
		a.now[w.key] = cur
	}
}

// holder returns key's owner, and the owner it is being handed to, as far
// as the store's accepted writes say; while an operator's tool holds it,
// the owner the tool took it from, and when.
func (a *auditor) holder(key string) (owner, handoffTo, takenFrom string, takenAt time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	w := a.now[key]
	return w.owner, w.handoffTo, w.takenFrom, w.takenAt
}

// auditStore sits between a worker's fault injector and the MemoryStore
// (fake world): it sees every write the store accepted, lost replies
// included, with the handle the worker wrote under.
type auditStore struct {
	shardlease.LeaseStore
	shardlease.WorkerStore // worker rows are not leases: passed on unaudited
	a                      *auditor
	by                     string
}

func (s *auditStore) done(op string, claim shardlease.Lease, claimed bool, got shardlease.Lease, err error) {
	if err != nil {
		if errors.Is(err, shardlease.ErrLeaseLost) {
			s.a.refuse(op)
		}
		return
	}
	w := write{key: got.Key.String(), op: op, by: s.by, claimCtr: -1, owner: got.Owner, handoffTo: got.HandoffTo, counter: got.Counter, checkpoint: got.Checkpoint}
	if claimed {
		w.claimOwner, w.claimCtr = claim.Owner, claim.Counter
	}
	s.a.record(w)
}

func (s *auditStore) Create(ctx context.Context, k shardlease.LeaseKey, p []string) (bool, error) {
	created, err := s.LeaseStore.Create(ctx, k, p)
	if err == nil && created {
		s.a.record(write{key: k.String(), op: "create", by: s.by, claimCtr: -1})
	}
	return created, err
}

func (s *auditStore) Acquire(ctx context.Context, k shardlease.LeaseKey, owner string, observed int64) (shardlease.Lease, error) {
	got, err := s.LeaseStore.Acquire(ctx, k, owner, observed)
	s.done("acquire", shardlease.Lease{}, false, got, err)
	return got, err
}

func (s *auditStore) Renew(ctx context.Context, l shardlease.Lease, e time.Time) (shardlease.Lease, error) {
	s.a.skew(e)
	got, err := s.LeaseStore.Renew(ctx, l, e)
	s.done("renew", l, true, got, err)
	s.a.acceptedInSession(ctx, err)
	return got, err
}

func (s *auditStore) Checkpoint(ctx context.Context, l shardlease.Lease, cp string, sub int64, e time.Time) (shardlease.Lease, error) {
	s.a.skew(e)
	got, err := s.LeaseStore.Checkpoint(ctx, l, cp, sub, e)
	s.done("checkpoint", l, true, got, err)
	s.a.acceptedInSession(ctx, err)
	return got, err
}

func (s *auditStore) Release(ctx context.Context, l shardlease.Lease) (shardlease.Lease, error) {
	got, err := s.LeaseStore.Release(ctx, l)
	if err == nil && got.Counter != l.Counter+1 {
		return got, err // free already (released twice): no write
	}
	s.done("release", l, true, got, err)
	s.a.acceptedInSession(ctx, err)
	return got, err
}

func (s *auditStore) RequestHandoff(ctx context.Context, l shardlease.Lease, taker string) (shardlease.Lease, error) {
	got, err := s.LeaseStore.RequestHandoff(ctx, l, taker)
	s.done("handoff", shardlease.Lease{}, false, got, err)
	return got, err
}

// Note and GetEventually pass on: a note leaves the counter, owner and
// checkpoint as they are.
func (s *auditStore) Note(ctx context.Context, l shardlease.Lease, note string) (shardlease.Lease, error) {
	return s.LeaseStore.(shardlease.NoteStore).Note(ctx, l, note)
}

func (s *auditStore) GetEventually(ctx context.Context, k shardlease.LeaseKey) (shardlease.Lease, error) {
	return s.LeaseStore.(shardlease.NoteStore).GetEventually(ctx, k)
}

// auditDynamo sits between a worker's fault injector and the DynamoDB client
// (emulator world): it records every write the server accepted, lost
// replies included, from the request's condition values and the row the
// server returned.
type auditDynamo struct {
	shardlease.DynamoDBAPI
	a  *auditor
	by string
}

func (d *auditDynamo) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	out, err := d.DynamoDBAPI.PutItem(ctx, in, o...)
	if err == nil {
		d.a.record(write{key: avString(in.Item["lease_key"]), op: "create", by: d.by, claimCtr: -1})
	}
	return out, err
}

func (d *auditDynamo) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if isSpecialKey(avString(in.Key["lease_key"])) {
		return d.DynamoDBAPI.UpdateItem(ctx, in, o...) // a worker row, the fence floor: not a lease
	}
	vals := in.ExpressionAttributeValues
	op := "acquire"
	claimed := false
	switch {
	case vals[":me"] != nil:
		claimed = true
		update := aws.ToString(in.UpdateExpression)
		switch {
		case !strings.Contains(update, "lease_expiry") && !strings.Contains(update, "lease_owner"):
			op = "rewind" // RewindRow: neither a renewal nor a release
		case strings.Contains(update, "checkpoint ="):
			op = "checkpoint"
		case strings.Contains(update, "lease_expiry ="):
			op = "renew"
		default:
			op = "release"
		}
	case vals[":holder"] != nil || vals[":taker"] != nil:
		op = "handoff" // a request or its withdrawal: the counter stays
	}
	if ms, err := strconv.ParseInt(avNumber(vals[":expiry"]), 10, 64); err == nil {
		d.a.skew(time.UnixMilli(ms))
	}
	out, err := d.DynamoDBAPI.UpdateItem(ctx, in, o...)
	if err != nil {
		var cf *dynamotypes.ConditionalCheckFailedException
		if claimed && errors.As(err, &cf) {
			d.a.refuse(op)
		}
		if errors.As(err, &cf) && len(cf.Item) > 0 {
			// The row as it is: a write whose reply was lost (a timeout
			// after it landed) made it, and the store may recognise that
			// write as its caller's own.
			d.a.observe(cf.Item, d.by)
		}
		return out, err
	}
	row := out.Attributes
	w := write{key: avString(row["lease_key"]), op: op, by: d.by, claimCtr: -1,
		owner: avString(row["lease_owner"]), handoffTo: avString(row["handoff_to"]), checkpoint: avString(row["checkpoint"])}
	w.counter, _ = strconv.ParseInt(avNumber(row["lease_counter"]), 10, 64)
	if claimed {
		w.claimOwner = avString(vals[":me"])
		w.claimCtr, _ = strconv.ParseInt(avNumber(vals[":mine"]), 10, 64)
		d.a.acceptedInSession(ctx, nil)
	}
	d.a.record(w)
	return out, err
}

// GetItem records the row read: the store reads a row to recognise a write
// of its caller's whose reply was lost.
func (d *auditDynamo) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	out, err := d.DynamoDBAPI.GetItem(ctx, in, o...)
	if err == nil && len(out.Item) > 0 {
		d.a.observe(out.Item, d.by)
	}
	return out, err
}

// Scan records every lease row a listing returned. A write the server
// applied after the caller's deadline had passed returns an error to the
// audit too, so the audit never saw the counter it produced; the worker may
// still learn that counter from a listing (a row naming it that it does not
// run, released at shutdown) and write under it. The listing is where the
// audit learns it as well.
func (d *auditDynamo) Scan(ctx context.Context, in *dynamodb.ScanInput, o ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	out, err := d.DynamoDBAPI.Scan(ctx, in, o...)
	if err == nil {
		d.a.observeAll(out.Items, d.by)
	}
	return out, err
}

// observeAll records the lease rows of a listing (record leaves the
// others out).
func (a *auditor) observeAll(rows []map[string]dynamotypes.AttributeValue, by string) {
	for _, row := range rows {
		a.observe(row, by)
	}
}

// observe records a row as it was read: the owner its counter goes with
// (record leaves rows that are no leases out).
func (a *auditor) observe(row map[string]dynamotypes.AttributeValue, by string) {
	n, err := strconv.ParseInt(avNumber(row["lease_counter"]), 10, 64)
	if err != nil {
		return
	}
	a.record(write{key: avString(row["lease_key"]), op: "observed", by: by, claimCtr: -1,
		owner: avString(row["lease_owner"]), handoffTo: avString(row["handoff_to"]), checkpoint: avString(row["checkpoint"]), counter: n})
}

func avString(av dynamotypes.AttributeValue) string {
	if s, ok := av.(*dynamotypes.AttributeValueMemberS); ok {
		return s.Value
	}
	return ""
}

func avNumber(av dynamotypes.AttributeValue) string {
	if n, ok := av.(*dynamotypes.AttributeValueMemberN); ok {
		return n.Value
	}
	return ""
}

// fencing checks the store's record: every renew, checkpoint and release it
// accepted was made under the handle of the row's holder at that moment,
// i.e. the write that produced the claimed counter left the claimed owner
// in the row. It returns the number of violations with a few examples.
func (a *auditor) fencing(fake bool) (checked, stale int, examples []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	ownerAt := map[string]string{} // key#counter → owner after the write
	for _, w := range a.writes {
		if w.op != "handoff" {
			ownerAt[hookKey(w.key, w.gen, w.counter)] = w.owner
		}
	}
	for _, w := range a.writes {
		if w.claimCtr < 0 {
			continue
		}
		checked++
		prev, ok := ownerAt[hookKey(w.key, w.gen, w.claimCtr)]
		bad := !ok || prev != w.claimOwner || w.counter != w.claimCtr+1
		if fake {
			// MemoryStore's own record of the row before the write.
			before, ok := a.hook[hookKey(w.key, w.gen, w.counter)]
			bad = bad || !ok || before.Owner != w.claimOwner || before.Counter != w.claimCtr
		}
		if bad {
			stale++
			if len(examples) < 5 {
				examples = append(examples, fmt.Sprintf("%s %s by %s under (%s, %d) accepted; the row then had owner %q (known %v)", w.op, w.key, w.by, w.claimOwner, w.claimCtr, prev, ok))
			}
		}
	}
	return checked, stale, examples
}

// regressions counts, per row, accepted writes whose checkpoint is behind
// the one before them (in counter order); an operator's rewind or reset is
// the one write that may move it back.
func (a *auditor) regressions() (n int, examples []string) {
	a.mu.Lock()
	byKey := map[string][]write{} // by row and generation
	for _, w := range a.writes {
		if w.op != "handoff" && w.op != "observed" {
			k := w.key + "#" + strconv.Itoa(w.gen)
			byKey[k] = append(byKey[k], w)
		}
	}
	a.mu.Unlock()
	for key, ws := range byKey {
		slices.SortFunc(ws, func(x, y write) int { return int(x.counter - y.counter) })
		for i := 1; i < len(ws); i++ {
			if ws[i].by != operator && seqnum.Compare(ws[i].checkpoint, ws[i-1].checkpoint) < 0 {
				n++
				if len(examples) < 5 {
					examples = append(examples, fmt.Sprintf("%s: checkpoint %s at counter %d after %s at counter %d", key, ws[i].checkpoint, ws[i].counter, ws[i-1].checkpoint, ws[i-1].counter))
				}
			}
		}
	}
	return n, examples
}

// checkpointedPast reports whether owner got a checkpoint at or past seq
// accepted on key before t.
func (a *auditor) checkpointedPast(key, owner, seq string, t time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, w := range a.writes {
		if w.key == key && w.claimOwner == owner && w.at.Before(t) && seqnum.Compare(w.checkpoint, seq) >= 0 {
			return true
		}
	}
	return false
}
