package shardlease

// This file is the codec of the lease table's rows, and owns both
// directions: the attribute names, the encoders that build items and
// attribute values for every write, and the decoders that turn items back
// into leases, worker rows and stream identities. A row the decoders refuse
// is an error matching ErrCorruptLease that names the row and the attribute
// and says what to do; the stores never guess at a corrupt row.

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/shardlease/shardlease/internal/ddbattr"
)

// Attribute names of a lease row.
const (
	attrKey         = "lease_key"
	attrOwner       = "lease_owner"
	attrCounter     = "lease_counter"
	attrCheckpoint  = "checkpoint"
	attrSubSequence = "checkpoint_sub"
	attrParents     = "parent_shards"
	attrExpiry      = "lease_expiry"
	attrHandoff     = "handoff_to"
	attrDuration    = "lease_duration"
	attrNote        = "lease_note"
	attrBehind      = "behind_latest"  // N: ms, the holder's lag (see HolderLag)
	attrCkptAge     = "checkpoint_age" // N: ms
	attrLagCounter  = "lag_counter"    // N: the counter of the write that wrote the lag
)

// Attribute names of sessions (see lease_session.go).
const (
	attrSession     = "lease_session" // S, on a lease row a session keeps: the session's worker row key
	attrSessionGen  = "session_gen"   // N, on that lease row and on the worker row: the generation
	attrSessionMail = "session_mail"  // SS, on the worker row: lease keys left for the holder
	// sessionDuration is the lease_duration of a row a session keeps: a
	// string where releases from before sessions read a number, so that
	// they read the row as corrupt and never take it. It is followed by
	// ":" and the holder's lease duration in milliseconds when its acquire
	// carried one ("session:10000"); alone it decodes as no duration.
	sessionDuration = "session"
)

// Attribute names of the lineage and identity rows.
const (
	attrStart        = "start_position"    // S: TRIM_HORIZON, LATEST or AT_TIMESTAMP
	attrStartTime    = "start_timestamp"   // N: unix ms, with AT_TIMESTAMP
	attrStreamARN    = "stream_arn"        // S, on the identity row
	attrStreamCreate = "stream_created"    // N: unix ns, on the identity row
	attrFenceCounter = "fence_counter"     // N: the last counter reserved, on the floor row
	attrFenceEpoch   = "fence_epoch"       // N: unix ms, on the floor row and on each lease row its acquire wrote
	attrIncarnation  = "lease_incarnation" // S: the random id a lease row was made with
)

// keyAttr is the key of key's row.
func keyAttr(key LeaseKey) map[string]types.AttributeValue { return rawKeyAttr(key.String()) }

// rawKeyAttr is the key of the row whose lease_key is raw: a bare shard id
// of an earlier release, or a key read back from a Scan.
func rawKeyAttr(raw string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrKey: str(raw)}
}

// num is n as a number attribute.
func num(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

// str is v as a string attribute.
func str(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }

// expiryAttr is an expiry in unix milliseconds.
func expiryAttr(t time.Time) types.AttributeValue { return num(t.UnixMilli()) }

// durationAttr is a lease duration in milliseconds.
func durationAttr(d time.Duration) types.AttributeValue { return num(d.Milliseconds()) }

// parentsAttr is a copy of parents as a string set. parents must not be
// empty: DynamoDB stores no empty set.
func parentsAttr(parents []string) types.AttributeValue {
	return &types.AttributeValueMemberSS{Value: slices.Clone(parents)}
}

// newRowItem is the item of key's new row: free, at counter 0, with
// parents and start when they are set.
func newRowItem(key LeaseKey, parents []string, start Start) map[string]types.AttributeValue {
	item := keyAttr(key)
	item[attrCounter] = num(0)
	item[attrIncarnation] = str(newRowIncarnation())
	if len(parents) > 0 {
		item[attrParents] = parentsAttr(parents)
	}
	startAttrs(item, start)
	return item
}

// startAttrs adds the attributes of start to item.
func startAttrs(item map[string]types.AttributeValue, start Start) {
	maps.Copy(item, startValues(start))
}

// startValues is start's attributes by name: none for the zero Start, and
// start_timestamp only with AT_TIMESTAMP.
func startValues(start Start) map[string]types.AttributeValue {
	if start.IsZero() {
		return nil
	}
	values := map[string]types.AttributeValue{attrStart: str(string(start.Position))}
	if start.Position == AtTimestamp {
		values[attrStartTime] = num(start.Timestamp.UnixMilli())
	}
	return values
}

// lineageClauses returns the SET and REMOVE clauses that replace a row's
// parents and start, filling :parents, :start and :startTime in vals.
func lineageClauses(vals map[string]types.AttributeValue, parents []string, start Start) (set, remove []string) {
	if len(parents) > 0 {
		set = append(set, attrParents+" = :parents")
		vals[":parents"] = parentsAttr(parents)
	} else {
		remove = append(remove, attrParents)
	}
	return startClauses(vals, start, set, remove)
}

// startClauses appends to set and remove the clauses that write start,
// filling :start and :startTime in vals (an attribute start has no value
// for is removed).
func startClauses(vals map[string]types.AttributeValue, start Start, set, remove []string) ([]string, []string) {
	values := startValues(start)
	for _, a := range []struct{ name, placeholder string }{{attrStart, ":start"}, {attrStartTime, ":startTime"}} {
		v, ok := values[a.name]
		if !ok {
			remove = append(remove, a.name)
			continue
		}
		set = append(set, a.name+" = "+a.placeholder)
		vals[a.placeholder] = v
	}
	return set, remove
}

// checkpointSet returns the SET/REMOVE clauses that write checkpoint and
// sub-sequence, filling :cp and :sub in vals.
func checkpointSet(vals map[string]types.AttributeValue, checkpoint string, sub int64) (set, remove string) {
	vals[":cp"] = str(checkpoint)
	if sub >= 0 {
		vals[":sub"] = num(sub)
		return "checkpoint = :cp, checkpoint_sub = :sub", ""
	}
	return "checkpoint = :cp", " REMOVE checkpoint_sub"
}

// identityItem is the item of id's identity row.
func identityItem(id StreamIdentity) map[string]types.AttributeValue {
	item := keyAttr(identityKey(id.Stream))
	item[attrStreamARN] = str(id.ARN)
	item[attrStreamCreate] = num(id.Created.UnixNano())
	return item
}

// decodeLease turns a row into a Lease. A row whose attributes have the
// wrong types or values is an error matching ErrCorruptLease that names the
// row and the attribute. The attribute groups are read in a fixed order, so
// a row with several corrupt attributes is always named by the same one.
func decodeLease(item map[string]types.AttributeValue) (Lease, error) {
	key, err := decodeLeaseKey(item)
	if err != nil {
		return Lease{}, err
	}
	r := leaseRow{key: key, item: item}
	l := Lease{Key: key, SubSequence: -1}
	for _, decode := range []func(leaseRow, *Lease) error{
		decodeHolder, decodeProgress, decodeParents, decodeTerms, decodeStart, decodeDuration, decodeSession, decodeLag, decodeFenceEpoch,
	} {
		if err := decode(r, &l); err != nil {
			return Lease{}, err
		}
	}
	return l, nil
}

// decodeLeaseKey reads a row's lease_key, which must be "stream:shard".
func decodeLeaseKey(item map[string]types.AttributeValue) (LeaseKey, error) {
	keyAV, ok := item[attrKey].(*types.AttributeValueMemberS)
	if !ok {
		return LeaseKey{}, errorf("%w: a row has no string %s attribute (found %s); delete the row or fix it by hand", ErrCorruptLease, attrKey, ddbattr.TypeName(item[attrKey]))
	}
	key, err := ParseLeaseKey(keyAV.Value)
	if err != nil {
		return LeaseKey{}, errorf("%w: row %q: %w; delete the row or fix its %s", ErrCorruptLease, keyAV.Value, err, attrKey)
	}
	return key, nil
}

// leaseRow reads the attributes of the lease row of key. Its errors match
// ErrCorruptLease and name the row and the attribute.
type leaseRow struct {
	key  LeaseKey
	item map[string]types.AttributeValue
}

// corrupt is the error for attribute attr, which is not want; detail, when
// set, says why.
func (r leaseRow) corrupt(attr, want string, detail error) error {
	extra := ""
	if detail != nil {
		extra = " (" + detail.Error() + ")"
	}
	return errorf("%w: row %q: attribute %s is %s, want %s%s; fix the attribute by hand or delete the row (its checkpoint is lost with it)",
		ErrCorruptLease, r.key, attr, ddbattr.TypeName(r.item[attr]), want, extra)
}

// stringAttr reads attr as a string; present is false when it is absent.
func (r leaseRow) stringAttr(attr string) (v string, present bool, err error) {
	av, present := r.item[attr]
	if !present {
		return "", false, nil
	}
	s, ok := av.(*types.AttributeValueMemberS)
	if !ok {
		return "", true, r.corrupt(attr, "a string", nil)
	}
	return s.Value, true, nil
}

// intAttr reads attr as a whole number; present is false when it is absent.
func (r leaseRow) intAttr(attr string) (n int64, present bool, err error) {
	av, present := r.item[attr]
	if !present {
		return 0, false, nil
	}
	v, ok := av.(*types.AttributeValueMemberN)
	if !ok {
		return 0, true, r.corrupt(attr, "a number", nil)
	}
	n, err = strconv.ParseInt(v.Value, 10, 64)
	if err != nil {
		return 0, true, r.corrupt(attr, "a whole number", err)
	}
	return n, true, nil
}

// nonNegativeAttr reads attr as intAttr does and refuses a negative number
// as not want.
func (r leaseRow) nonNegativeAttr(attr, want string) (n int64, present bool, err error) {
	n, present, err = r.intAttr(attr)
	if err == nil && n < 0 {
		return 0, true, r.corrupt(attr, want, nil)
	}
	return n, present, err
}

// decodeHolder reads the owner and the counter, which every row has.
func decodeHolder(r leaseRow, l *Lease) (err error) {
	if l.Owner, _, err = r.stringAttr(attrOwner); err != nil {
		return err
	}
	counter, present, err := r.nonNegativeAttr(attrCounter, "a non-negative number")
	if err != nil {
		return err
	}
	if !present {
		return r.corrupt(attrCounter, "a number", nil)
	}
	l.Counter = counter
	return nil
}

// decodeProgress reads the checkpoint and its sub-sequence.
func decodeProgress(r leaseRow, l *Lease) error {
	cp, present, err := r.stringAttr(attrCheckpoint)
	if err != nil {
		return err
	}
	if present && validCheckpoint(cp, -1) != nil {
		return r.corrupt(attrCheckpoint, "a sequence number or "+ShardEnd, nil)
	}
	l.Checkpoint = cp
	sub, present, err := r.nonNegativeAttr(attrSubSequence, "a non-negative number")
	if err != nil {
		return err
	}
	if present {
		l.SubSequence = sub
	}
	return nil
}

// decodeParents reads the parent shards, sorted.
func decodeParents(r leaseRow, l *Lease) error {
	av, present := r.item[attrParents]
	if !present {
		return nil
	}
	v, ok := av.(*types.AttributeValueMemberSS)
	if !ok {
		return r.corrupt(attrParents, "a string set", nil)
	}
	for _, p := range v.Value {
		if err := ValidateShardID(p); err != nil {
			return r.corrupt(attrParents, "a set of shard ids", err)
		}
	}
	if len(v.Value) > 0 { // an empty set (which DynamoDB refuses to store) is no parents
		l.Parents = slices.Clone(v.Value)
		slices.Sort(l.Parents)
	}
	return nil
}

// decodeTerms reads the terms the row is held on: the expiry written for
// operators, the handoff request and the note.
func decodeTerms(r leaseRow, l *Lease) (err error) {
	ms, present, err := r.intAttr(attrExpiry)
	if err != nil {
		return err
	}
	if present {
		l.Expiry = unixMilliTime(ms)
	}
	if l.HandoffTo, _, err = r.stringAttr(attrHandoff); err != nil {
		return err
	}
	l.Note, _, err = r.stringAttr(attrNote)
	return err
}

// decodeStart reads where the shard starts when it has no checkpoint.
func decodeStart(r leaseRow, l *Lease) error {
	position, present, err := r.stringAttr(attrStart)
	if err != nil || !present {
		return err
	}
	l.Start.Position = InitialPosition(position)
	ms, present, err := r.intAttr(attrStartTime)
	if err != nil {
		return err
	}
	if present {
		l.Start.Timestamp = unixMilliTime(ms)
	}
	if err := l.Start.validate(); err != nil {
		return r.corrupt(attrStart, "TRIM_HORIZON, LATEST, or AT_TIMESTAMP with a "+attrStartTime, err)
	}
	return nil
}

// unixMilliTime is the time of ms unix milliseconds. The zero instant
// (January 1, year 1, UTC) is the zero Time, which IsZero reports and which
// the encoders leave out, so that a row's time survives a round trip.
func unixMilliTime(ms int64) time.Time {
	t := time.UnixMilli(ms)
	if t.IsZero() {
		return time.Time{}
	}
	return t
}

// decodeDuration reads the lease duration the holder runs with: none on a
// row a session keeps (the string sessionDuration).
func decodeDuration(r leaseRow, l *Lease) error {
	if s, ok := r.item[attrDuration].(*types.AttributeValueMemberS); ok {
		if s.Value == sessionDuration {
			return nil
		}
		if ms, ok := strings.CutPrefix(s.Value, sessionDuration+":"); ok {
			n, err := strconv.ParseInt(ms, 10, 64)
			if err != nil || n < 0 {
				return r.corrupt(attrDuration, "\""+sessionDuration+"\" or \""+sessionDuration+":<ms>\"", err)
			}
			l.Duration = time.Duration(n) * time.Millisecond
			return nil
		}
	}
	ms, present, err := r.nonNegativeAttr(attrDuration, "a non-negative number of milliseconds (or \""+sessionDuration+"\" on a row a session keeps)")
	if err != nil {
		return err
	}
	if present {
		l.Duration = time.Duration(ms) * time.Millisecond
	}
	return nil
}

// decodeSession reads the session that keeps the lease: its worker row's
// key, which must be "stream:@owner", and its generation, which must be
// there, and not 0, with it (and only with it).
func decodeSession(r leaseRow, l *Lease) error {
	session, present, err := r.stringAttr(attrSession)
	if err != nil {
		return err
	}
	gen, genPresent, err := r.intAttr(attrSessionGen)
	if err != nil {
		return err
	}
	if present {
		stream, owner, _ := strings.Cut(session, ":"+workerMark)
		if ValidateStreamName(stream) != nil || owner == "" {
			return r.corrupt(attrSession, "a worker row key \"stream:@owner\"", nil)
		}
	}
	switch {
	case present && gen == 0:
		return r.corrupt(attrSessionGen, "a generation other than 0 beside "+attrSession, nil)
	case !present && genPresent:
		return r.corrupt(attrSession, "a worker row key beside "+attrSessionGen, nil)
	}
	l.Session, l.SessionGen = session, gen
	return nil
}

// decodeFenceEpoch reads the floor epoch the row's last acquire wrote
// (absent on rows an earlier release acquired: zero) and the row's
// incarnation.
func decodeFenceEpoch(r leaseRow, l *Lease) error {
	e, present, err := r.nonNegativeAttr(attrFenceEpoch, "a non-negative number of milliseconds")
	if err != nil {
		return err
	}
	if present {
		l.fenceEpoch = e
	}
	if inc, ok := r.item[attrIncarnation].(*types.AttributeValueMemberS); ok {
		l.incarnation = inc.Value
	}
	return nil
}

// decodeWorker decodes item if it is one of stream's worker rows (ok).
func decodeWorker(item map[string]types.AttributeValue, stream string) (w Worker, ok bool, err error) {
	keyAV, _ := item[attrKey].(*types.AttributeValueMemberS)
	if keyAV == nil {
		return Worker{}, false, nil
	}
	owner, ok := strings.CutPrefix(keyAV.Value, stream+":"+workerMark)
	if !ok {
		return Worker{}, false, nil
	}
	w = Worker{Stream: stream, Owner: owner}
	n, isNum := item[attrCounter].(*types.AttributeValueMemberN)
	if !isNum {
		return w, true, errorf("%w: worker row %q: attribute %s is %s, want a number; delete the row (the worker writes it again)", ErrCorruptLease, keyAV.Value, attrCounter, ddbattr.TypeName(item[attrCounter]))
	}
	if w.Counter, err = strconv.ParseInt(n.Value, 10, 64); err != nil || owner == "" {
		return w, true, errorf("%w: worker row %q has no owner or a counter that is not a whole number; delete the row (the worker writes it again)", ErrCorruptLease, keyAV.Value)
	}
	return decodeWorkerSession(item, w)
}

// decodeWorkerSession reads the session on worker row w: its generation
// and the holder's lease duration (both absent on a row without one).
func decodeWorkerSession(item map[string]types.AttributeValue, w Worker) (Worker, bool, error) {
	var ms int64
	for _, a := range []struct {
		name string
		to   *int64
	}{{attrSessionGen, &w.Gen}, {attrDuration, &ms}} {
		av, present := item[a.name]
		if !present {
			continue
		}
		n, ok := av.(*types.AttributeValueMemberN)
		v, err := int64(0), error(nil)
		if ok {
			v, err = strconv.ParseInt(n.Value, 10, 64)
		}
		if !ok || err != nil || v < 0 {
			return w, true, errorf("%w: worker row %q: attribute %s is %s, want a non-negative whole number; delete the row (its worker opens its session again, and its leases are taken once their session stands still)", ErrCorruptLease, w.Key(), a.name, ddbattr.TypeName(av))
		}
		*a.to = v
	}
	w.Duration = time.Duration(ms) * time.Millisecond
	return w, true, nil
}

// decodeMail reads the mail of a worker row: the lease keys of its
// session_mail, sorted; nil when it has none.
func decodeMail(item map[string]types.AttributeValue, w Worker) ([]string, error) {
	av, present := item[attrSessionMail]
	if !present {
		return nil, nil
	}
	v, ok := av.(*types.AttributeValueMemberSS)
	if !ok {
		return nil, errorf("%w: worker row %q: attribute %s is %s, want a string set; delete the attribute (the mail is lost: its senders ask again)", ErrCorruptLease, w.Key(), attrSessionMail, ddbattr.TypeName(av))
	}
	if len(v.Value) == 0 {
		return nil, nil
	}
	mail := slices.Clone(v.Value)
	slices.Sort(mail)
	return mail, nil
}

// decodeIdentity decodes the identity row of stream.
func decodeIdentity(stream string, item map[string]types.AttributeValue) (StreamIdentity, error) {
	arn, ok1 := item[attrStreamARN].(*types.AttributeValueMemberS)
	created, ok2 := item[attrStreamCreate].(*types.AttributeValueMemberN)
	if !ok1 || !ok2 {
		return StreamIdentity{}, errorf("%w: identity row of stream %s has no string %s or number %s; delete the row (consumers record it again)", ErrCorruptLease, stream, attrStreamARN, attrStreamCreate)
	}
	ns, err := strconv.ParseInt(created.Value, 10, 64)
	if err != nil {
		return StreamIdentity{}, errorf("%w: identity row of stream %s: %s is not a whole number; delete the row (consumers record it again)", ErrCorruptLease, stream, attrStreamCreate)
	}
	return StreamIdentity{Stream: stream, ARN: arn.Value, Created: time.Unix(0, ns)}, nil
}

// avString is av's value when it is a string, else "".
func avString(av types.AttributeValue) string {
	if s, ok := av.(*types.AttributeValueMemberS); ok {
		return s.Value
	}
	return ""
}

// rewindClauses returns the SET and REMOVE clauses that set a row's
// checkpoint to checkpoint ("" removes it) without a sub-sequence, and its
// start to start, filling :cp, :start and :startTime in vals. remove is
// never empty.
func rewindClauses(vals map[string]types.AttributeValue, checkpoint string, start Start) (set, remove []string) {
	remove = []string{attrSubSequence}
	if checkpoint == "" {
		remove = append(remove, attrCheckpoint)
	} else {
		set = append(set, attrCheckpoint+" = :cp")
		vals[":cp"] = str(checkpoint)
	}
	return startClauses(vals, start, set, remove)
}

// lagUpdate adds the holder's lag to expr, an update with a SET clause:
// the counter of the write that carries it, and each of its two durations
// that is not zero (a zero one is removed, so that a caught-up row stays
// about as small as a row without lag).
func lagUpdate(expr string, vals map[string]types.AttributeValue, lag Lag, held Lease) string {
	set := attrLagCounter + " = :lagAt, "
	vals[":lagAt"] = num(held.Counter + 1)
	var remove []string
	for _, a := range []struct {
		name, placeholder string
		d                 time.Duration
	}{{attrBehind, ":behind", lag.BehindLatest}, {attrCkptAge, ":ckptAge", lag.CheckpointAge}} {
		if ms := a.d.Milliseconds(); ms > 0 {
			set += a.name + " = " + a.placeholder + ", "
			vals[a.placeholder] = num(ms)
		} else {
			remove = append(remove, a.name)
		}
	}
	expr = strings.Replace(expr, "SET ", "SET "+set, 1)
	if len(remove) == 0 {
		return expr
	}
	if strings.Contains(expr, "REMOVE ") {
		return strings.Replace(expr, "REMOVE ", "REMOVE "+strings.Join(remove, ", ")+", ", 1)
	}
	return expr + " REMOVE " + strings.Join(remove, ", ")
}

// decodeLag reads the holder's lag, written by the write that left the
// row's counter. A lag of an earlier write, or one that is not two
// non-negative numbers, is no lag: it is the holder's report, never a
// decision's input, and the holder's next write replaces it.
func decodeLag(r leaseRow, l *Lease) error {
	at, ok1, err1 := r.intAttr(attrLagCounter)
	behind, _, err2 := r.intAttr(attrBehind) // absent: zero (see lagUpdate)
	age, _, err3 := r.intAttr(attrCkptAge)
	if err1 != nil || err2 != nil || err3 != nil || !ok1 || at != l.Counter || behind < 0 || age < 0 {
		return nil
	}
	l.Lag = &Lag{BehindLatest: time.Duration(behind) * time.Millisecond, CheckpointAge: time.Duration(age) * time.Millisecond}
	return nil
}
