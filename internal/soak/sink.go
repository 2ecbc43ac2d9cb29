package soak

// The fenced sink: every handler call applies its records' effects to a
// sink that keeps the highest fence token it applied and the last position
// applied, and refuses a write below either (docs/handlers.md,
// "Exactly-once effects"). The soak's handlers are handed records twice
// after crashes, pauses and lost leases; the sink must still apply each
// effect once. Two sinks: in process (the fake world), where one lock is
// the transaction, with the token per shard and the position per partition
// key; and on dynalite (the emulator world), one item per shard and
// partition key written by a conditional UpdateItem per record, through
// the worker's faults (lost replies included).
//
// The audit reads what the sink holds, not what the sink code decided:
// each accepted write appends its token to a log kept with the data (a
// list on the item), so a stale write accepted shows as a log that goes
// down; each effect bumps a count beside the set of record ids applied, so
// an effect applied twice shows as a count above the set's size.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	dynamotypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/shardlease/shardlease"
)

// errFenced is what the sink refuses a stale holder's write with.
var errFenced = errors.New("soak: the sink refused the write: a newer holder of the shard wrote already")

// sink is where handlers apply each record's effect.
type sink interface {
	// apply applies recs, handed with tok by the holding numbered hold
	// (holdings.go), or fails with errFenced when a newer holder wrote;
	// records applied before are passed over. The sink keeps hold beside
	// each accepted write, for the audit alone: it decides by the token.
	apply(ctx context.Context, inc *incarnation, tok shardlease.FenceToken, hold int, recs []shardlease.Record) error
	// audit reads the sink: the effects applied by record id, and the
	// accepted writes whose token was below one accepted before, or whose
	// holding began before the holding of one accepted before.
	audit(ctx context.Context) (applied map[string]int, stale []string, err error)
}

// sinkState is the soak's side of the sink: which records' writes were
// acknowledged (for the drain) and the refusals seen.
type sinkState struct {
	mu      sync.Mutex
	done    map[string]bool // record id → its effect is in the sink
	refused int64           // writes refused for their token
	skipped int64           // records passed over as applied already
	live    []string        // refusals of the latest holding of the row (holdings.go)
	clients map[*incarnation]shardlease.DynamoDBAPI
}

func (st *sinkState) note(id string, skipped bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.done == nil {
		st.done = map[string]bool{}
	}
	st.done[id] = true
	if skipped {
		st.skipped++
	}
}

func (st *sinkState) has(id string) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.done[id]
}

func (st *sinkState) refuse() {
	st.mu.Lock()
	st.refused++
	st.mu.Unlock()
}

// memorySink is the in-process sink: per shard the highest token, per
// partition key the last position, under one lock.
type memorySink struct {
	st *sinkState

	mu      sync.Mutex
	token   map[string]shardlease.FenceToken   // scope → highest token applied
	last    map[string]string                  // scope/key → last position applied
	applied map[string]int                     // id → effects applied
	log     map[string][]shardlease.FenceToken // scope → tokens of accepted writes, in order
	holds   map[string][]int                   // scope → holdings of accepted writes, in order
}

func newMemorySink(st *sinkState) *memorySink {
	return &memorySink{st: st, token: map[string]shardlease.FenceToken{}, last: map[string]string{},
		applied: map[string]int{}, log: map[string][]shardlease.FenceToken{}, holds: map[string][]int{}}
}

func (m *memorySink) apply(ctx context.Context, inc *incarnation, tok shardlease.FenceToken, hold int, recs []shardlease.Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	scope := tok.Scope()
	if have, ok := m.token[scope]; ok {
		c, err := tok.Compare(have)
		if err != nil {
			return err
		}
		if c < 0 {
			m.st.refuse()
			return fmt.Errorf("%s below %s: %w", tok, have, errFenced)
		}
	}
	m.token[scope] = tok
	m.log[scope] = append(m.log[scope], tok)
	m.holds[scope] = append(m.holds[scope], hold)
	for _, r := range recs {
		k := scope + "/" + r.PartitionKey
		pos := r.FencePosition()
		if pos <= m.last[k] {
			m.st.note(string(r.Data), true)
			continue
		}
		m.last[k] = pos
		m.applied[string(r.Data)]++
		m.st.note(string(r.Data), false)
	}
	return nil
}

func (m *memorySink) audit(context.Context) (map[string]int, []string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	applied := make(map[string]int, len(m.applied))
	for id, n := range m.applied {
		applied[id] = n
	}
	var stale []string
	for scope, toks := range m.log {
		stale = append(stale, descents(scope, toks)...)
		stale = append(stale, holdingDescents(scope, m.holds[scope])...)
	}
	return applied, stale, nil
}

// descents lists the writes of a token log whose token is below one
// accepted before it.
func descents(scope string, toks []shardlease.FenceToken) []string {
	var out []string
	var high shardlease.FenceToken
	for i, t := range toks {
		if i > 0 {
			if c, err := t.Compare(high); err != nil || c < 0 {
				out = append(out, fmt.Sprintf("%s: write %d with %s after %s", scope, i, t.Value(), high.Value()))
				continue
			}
		}
		high = t
	}
	return out
}

// dynamoSink is the sink on DynamoDB: an item per shard and partition key
// ("stream:shard/key") holding the token and position of its last write
// (tok, pos), the ids applied (ids), how many effects were applied (n), the
// tokens of every accepted write (toks) and their holdings (holds).
type dynamoSink struct {
	st    *sinkState
	admin shardlease.DynamoDBAPI
	table string
}

// sinkAttempts bounds the tries of one record's write on errors other than
// a refusal, as an SDK's retries would.
const sinkAttempts = 8

func (d *dynamoSink) client(inc *incarnation) shardlease.DynamoDBAPI {
	d.st.mu.Lock()
	defer d.st.mu.Unlock()
	if c := d.st.clients[inc]; c != nil {
		return c
	}
	return d.admin
}

func (d *dynamoSink) apply(ctx context.Context, inc *incarnation, tok shardlease.FenceToken, hold int, recs []shardlease.Record) error {
	db := d.client(inc)
	for _, r := range recs {
		var err error
		for attempt := range sinkAttempts {
			if err = d.write(ctx, db, tok, hold, r); err == nil || errors.Is(err, errFenced) || errors.Is(err, errCrashed) || ctx.Err() != nil {
				break
			}
			t := time.NewTimer(time.Duration(attempt+1) * 20 * time.Millisecond)
			<-t.C
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// write applies one record: a conditional UpdateItem, and on a failed
// condition a consistent read that tells a newer token from a record
// applied already.
func (d *dynamoSink) write(ctx context.Context, db shardlease.DynamoDBAPI, tok shardlease.FenceToken, hold int, r shardlease.Record) error {
	key := map[string]dynamotypes.AttributeValue{"lease_key": &dynamotypes.AttributeValueMemberS{Value: tok.Scope() + "/" + r.PartitionKey}}
	id := string(r.Data)
	_, err := db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:           aws.String(d.table),
		Key:                 key,
		ConditionExpression: aws.String("(attribute_not_exists(tok) OR tok <= :t) AND (attribute_not_exists(pos) OR pos < :p)"),
		UpdateExpression:    aws.String("SET tok = :t, pos = :p, toks = list_append(if_not_exists(toks, :none), :tl), holds = list_append(if_not_exists(holds, :none), :hl) ADD ids :id, n :one"),
		ExpressionAttributeValues: map[string]dynamotypes.AttributeValue{
			":t": &dynamotypes.AttributeValueMemberS{Value: tok.Value()}, ":p": &dynamotypes.AttributeValueMemberS{Value: r.FencePosition()},
			":tl":   &dynamotypes.AttributeValueMemberL{Value: []dynamotypes.AttributeValue{&dynamotypes.AttributeValueMemberS{Value: tok.Value()}}},
			":hl":   &dynamotypes.AttributeValueMemberL{Value: []dynamotypes.AttributeValue{&dynamotypes.AttributeValueMemberN{Value: strconv.Itoa(hold)}}},
			":none": &dynamotypes.AttributeValueMemberL{Value: []dynamotypes.AttributeValue{}},
			":id":   &dynamotypes.AttributeValueMemberSS{Value: []string{id}}, ":one": &dynamotypes.AttributeValueMemberN{Value: "1"},
		},
	})
	var failed *dynamotypes.ConditionalCheckFailedException
	switch {
	case err == nil:
		d.st.note(id, false)
		return nil
	case !errors.As(err, &failed):
		return err
	}
	out, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(d.table), Key: key, ConsistentRead: aws.Bool(true)})
	if err != nil {
		return err
	}
	if s, ok := out.Item["tok"].(*dynamotypes.AttributeValueMemberS); ok && s.Value > tok.Value() {
		d.st.refuse()
		return fmt.Errorf("%s below %s: %w", tok, s.Value, errFenced)
	}
	d.st.note(id, true) // at or below the last position: applied already
	return nil
}

func (d *dynamoSink) audit(ctx context.Context) (map[string]int, []string, error) {
	applied := map[string]int{}
	var stale []string
	var start map[string]dynamotypes.AttributeValue
	for {
		out, err := d.admin.Scan(ctx, &dynamodb.ScanInput{TableName: aws.String(d.table), ExclusiveStartKey: start, ConsistentRead: aws.Bool(true)})
		if err != nil {
			return nil, nil, fmt.Errorf("soak: scan the sink table %s: %w", d.table, err)
		}
		for _, item := range out.Items {
			stale = append(stale, auditItem(item, applied)...)
		}
		if len(out.LastEvaluatedKey) == 0 {
			return applied, stale, nil
		}
		start = out.LastEvaluatedKey
	}
}

// auditItem adds an item's effects to applied (an effect applied twice
// counts the item's last id again) and returns its stale writes.
func auditItem(item map[string]dynamotypes.AttributeValue, applied map[string]int) []string {
	key, _ := item["lease_key"].(*dynamotypes.AttributeValueMemberS)
	ids, _ := item["ids"].(*dynamotypes.AttributeValueMemberSS)
	n, _ := item["n"].(*dynamotypes.AttributeValueMemberN)
	if key == nil || ids == nil || n == nil {
		return nil
	}
	for _, id := range ids.Value {
		applied[id]++
	}
	if effects, err := strconv.Atoi(n.Value); err == nil && effects > len(ids.Value) {
		applied[ids.Value[0]] += effects - len(ids.Value)
	}
	var out []string
	high := ""
	toks, _ := item["toks"].(*dynamotypes.AttributeValueMemberL)
	if toks == nil {
		return nil
	}
	for i, v := range toks.Value {
		s, _ := v.(*dynamotypes.AttributeValueMemberS)
		if s == nil {
			continue
		}
		if s.Value < high {
			out = append(out, fmt.Sprintf("%s: write %d with %s after %s", key.Value, i, s.Value, high))
			continue
		}
		high = s.Value
	}
	return append(out, holdingDescents(key.Value, itemHolds(item))...)
}

// itemHolds returns the holdings of a sink item's accepted writes, in order.
func itemHolds(item map[string]dynamotypes.AttributeValue) []int {
	l, _ := item["holds"].(*dynamotypes.AttributeValueMemberL)
	if l == nil {
		return nil
	}
	out := make([]int, 0, len(l.Value))
	for _, v := range l.Value {
		h := noHolding
		if n, ok := v.(*dynamotypes.AttributeValueMemberN); ok {
			if i, err := strconv.Atoi(n.Value); err == nil {
				h = i
			}
		}
		out = append(out, h)
	}
	return out
}

// newSink returns the world's sink; the emulator world's table is made
// here.
func (s *soak) newSink(ctx context.Context) error {
	if s.cfg.Dynamo == nil {
		s.sink = newMemorySink(&s.sinkSt)
		return nil
	}
	table := s.cfg.Table + "-sink"
	if err := shardlease.CreateTable(ctx, s.cfg.Dynamo.(shardlease.CreateTableAPI), table); err != nil {
		return fmt.Errorf("soak: create the sink table %s: %w", table, err)
	}
	s.sinkSt.clients = map[*incarnation]shardlease.DynamoDBAPI{}
	s.sink = &dynamoSink{st: &s.sinkSt, admin: s.cfg.Dynamo, table: table}
	return nil
}

// attachSink gives an incarnation its own client to the sink, with its
// faults: a crashed worker's writes fail, a frozen one's wait, replies get
// lost.
func (s *soak) attachSink(inc *incarnation, in *injector) {
	if s.cfg.Dynamo == nil {
		return
	}
	s.sinkSt.mu.Lock()
	defer s.sinkSt.mu.Unlock()
	s.sinkSt.clients[inc] = &faultDynamo{next: s.cfg.Dynamo, in: in}
}

// applyToSink applies the records of a batch the handler accepted, and
// counts a refusal of the latest holding of the shard as the live holder
// refused.
func (s *soak) applyToSink(ctx context.Context, inc *incarnation, b *shardlease.Batch) error {
	tok := b.Fence()
	hold, _ := s.audit.holding(tok.Scope(), inc.consumer.OwnerID(), tok.Counter())
	err := s.sink.apply(ctx, inc, tok, hold, b.Records)
	if errors.Is(err, errFenced) && s.audit.stillLatest(tok.Scope(), hold) {
		s.sinkSt.liveRefused(fmt.Sprintf("the write of %s's holding #%d of %s (the latest) at %.1fs: %v", inc.id, hold, tok.Scope(), s.since(), err))
	}
	return err
}

// sinkResult fills in the sink's figures: effects applied twice, stale
// writes the sink accepted, and records handled whose effect is missing.
func (s *soak) sinkResult(ctx context.Context, r *Result, problem func(string, ...any)) {
	applied, stale, err := s.sink.audit(ctx)
	if err != nil {
		problem("%v", err)
		return
	}
	s.sinkSt.mu.Lock()
	r.SinkRefused, r.SinkSkipped = int(s.sinkSt.refused), int(s.sinkSt.skipped)
	live := slices.Clone(s.sinkSt.live)
	s.sinkSt.mu.Unlock()
	r.StaleSinkAccepted = len(stale)
	r.LiveRefused = len(live)
	for i, e := range live {
		if i < 5 {
			problem("live holder refused: %s", e)
		}
	}
	for i, e := range stale {
		if i < 5 {
			problem("stale sink write accepted: %s", e)
		}
	}
	for id, n := range applied {
		if n > 1 {
			r.AppliedTwice += n - 1
			if r.AppliedTwice <= 5 {
				problem("effect of %s applied %d times", id, n)
			}
		}
	}
	for _, id := range s.produced {
		if len(s.handled[id]) == 0 || s.deadLettered(id) {
			continue // lost (reported apart), or dead-lettered
		}
		if applied[id] == 0 {
			r.SinkMissing++
			if r.SinkMissing <= 5 {
				problem("record %s handled but its effect is not in the sink", id)
			}
		}
	}
}

// sinkDrained reports whether the effect of id is in the sink, or id was
// dead-lettered and never gets there. s.mu is held.
func (s *soak) sinkDrained(id string) bool { return s.deadLettered(id) || s.sinkSt.has(id) }

// deadLettered reports whether id went to the dead-letter callback. s.mu is
// held.
func (s *soak) deadLettered(id string) bool {
	return slices.ContainsFunc(s.handled[id], func(h handling) bool { return h.dead })
}
