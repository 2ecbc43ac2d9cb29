package shardlease

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
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
)

// Attribute names of the lineage and identity rows.
const (
	attrStart        = "start_position"  // S: TRIM_HORIZON, LATEST or AT_TIMESTAMP
	attrStartTime    = "start_timestamp" // N: unix ms, with AT_TIMESTAMP
	attrStreamARN    = "stream_arn"      // S, on the identity row
	attrStreamCreate = "stream_created"  // N: unix ns, on the identity row
)

func keyAttr(key LeaseKey) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrKey: &types.AttributeValueMemberS{Value: key.String()}}
}

func num(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

func str(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }

func expiryAttr(t time.Time) types.AttributeValue { return num(t.UnixMilli()) }

// startAttrs adds the attributes of start to item.
func startAttrs(item map[string]types.AttributeValue, start Start) {
	if start.IsZero() {
		return
	}
	item[attrStart] = str(string(start.Position))
	if start.Position == AtTimestamp {
		item[attrStartTime] = num(start.Timestamp.UnixMilli())
	}
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

func identityItem(id StreamIdentity) map[string]types.AttributeValue {
	item := keyAttr(identityKey(id.Stream))
	item[attrStreamARN] = str(id.ARN)
	item[attrStreamCreate] = num(id.Created.UnixNano())
	return item
}

// decodeLease turns a row into a Lease. A row whose attributes have the
// wrong types or values is an error matching ErrCorruptLease that names the
// row and the attribute.
func decodeLease(item map[string]types.AttributeValue) (Lease, error) {
	keyAV, ok := item[attrKey].(*types.AttributeValueMemberS)
	if !ok {
		return Lease{}, errorf("%w: a row has no string %s attribute (found %s); delete the row or fix it by hand", ErrCorruptLease, attrKey, avType(item[attrKey]))
	}
	key, err := ParseLeaseKey(keyAV.Value)
	if err != nil {
		return Lease{}, errorf("%w: row %q: %w; delete the row or fix its %s", ErrCorruptLease, keyAV.Value, err, attrKey)
	}
	corrupt := func(attr, want string, detail error) error {
		extra := ""
		if detail != nil {
			extra = " (" + detail.Error() + ")"
		}
		return errorf("%w: row %q: attribute %s is %s, want %s%s; fix the attribute by hand or delete the row (its checkpoint is lost with it)",
			ErrCorruptLease, key, attr, avType(item[attr]), want, extra)
	}
	l := Lease{Key: key, SubSequence: -1}
	if av, present := item[attrOwner]; present {
		v, ok := av.(*types.AttributeValueMemberS)
		if !ok {
			return Lease{}, corrupt(attrOwner, "a string", nil)
		}
		l.Owner = v.Value
	}
	numAttr := func(attr string) (int64, bool, error) {
		av, present := item[attr]
		if !present {
			return 0, false, nil
		}
		v, ok := av.(*types.AttributeValueMemberN)
		if !ok {
			return 0, true, corrupt(attr, "a number", nil)
		}
		n, err := strconv.ParseInt(v.Value, 10, 64)
		if err != nil {
			return 0, true, corrupt(attr, "a whole number", err)
		}
		return n, true, nil
	}
	counter, present, err := numAttr(attrCounter)
	if err != nil {
		return Lease{}, err
	}
	if !present {
		return Lease{}, corrupt(attrCounter, "a number", nil)
	}
	if counter < 0 {
		return Lease{}, corrupt(attrCounter, "a non-negative number", nil)
	}
	l.Counter = counter
	if av, present := item[attrCheckpoint]; present {
		v, ok := av.(*types.AttributeValueMemberS)
		if !ok {
			return Lease{}, corrupt(attrCheckpoint, "a string", nil)
		}
		if err := validCheckpoint(v.Value, -1); err != nil {
			return Lease{}, corrupt(attrCheckpoint, "a sequence number or "+ShardEnd, nil)
		}
		l.Checkpoint = v.Value
	}
	if sub, present, err := numAttr(attrSubSequence); err != nil {
		return Lease{}, err
	} else if present {
		if sub < 0 {
			return Lease{}, corrupt(attrSubSequence, "a non-negative number", nil)
		}
		l.SubSequence = sub
	}
	if av, present := item[attrParents]; present {
		v, ok := av.(*types.AttributeValueMemberSS)
		if !ok {
			return Lease{}, corrupt(attrParents, "a string set", nil)
		}
		for _, p := range v.Value {
			if err := ValidateShardID(p); err != nil {
				return Lease{}, corrupt(attrParents, "a set of shard ids", err)
			}
		}
		if len(v.Value) > 0 { // an empty set (which DynamoDB refuses to store) is no parents
			l.Parents = slices.Clone(v.Value)
			slices.Sort(l.Parents)
		}
	}
	if ms, present, err := numAttr(attrExpiry); err != nil {
		return Lease{}, err
	} else if present {
		l.Expiry = time.UnixMilli(ms)
	}
	if av, present := item[attrHandoff]; present {
		v, ok := av.(*types.AttributeValueMemberS)
		if !ok {
			return Lease{}, corrupt(attrHandoff, "a string", nil)
		}
		l.HandoffTo = v.Value
	}
	if av, present := item[attrNote]; present {
		v, ok := av.(*types.AttributeValueMemberS)
		if !ok {
			return Lease{}, corrupt(attrNote, "a string", nil)
		}
		l.Note = v.Value
	}
	if av, present := item[attrStart]; present {
		v, ok := av.(*types.AttributeValueMemberS)
		if !ok {
			return Lease{}, corrupt(attrStart, "a string", nil)
		}
		l.Start.Position = InitialPosition(v.Value)
		if ms, present, err := numAttr(attrStartTime); err != nil {
			return Lease{}, err
		} else if present {
			l.Start.Timestamp = time.UnixMilli(ms)
		}
		if err := l.Start.validate(); err != nil {
			return Lease{}, corrupt(attrStart, "TRIM_HORIZON, LATEST, or AT_TIMESTAMP with a "+attrStartTime, err)
		}
	}
	if ms, present, err := numAttr(attrDuration); err != nil {
		return Lease{}, err
	} else if present {
		if ms < 0 {
			return Lease{}, corrupt(attrDuration, "a non-negative number of milliseconds", nil)
		}
		l.Duration = time.Duration(ms) * time.Millisecond
	}
	return l, nil
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
		return w, true, errorf("%w: worker row %q: attribute %s is %s, want a number; delete the row (the worker writes it again)", ErrCorruptLease, keyAV.Value, attrCounter, avType(item[attrCounter]))
	}
	if w.Counter, err = strconv.ParseInt(n.Value, 10, 64); err != nil || owner == "" {
		return w, true, errorf("%w: worker row %q has no owner or a counter that is not a whole number; delete the row (the worker writes it again)", ErrCorruptLease, keyAV.Value)
	}
	return w, true, nil
}

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

func avString(av types.AttributeValue) string {
	if s, ok := av.(*types.AttributeValueMemberS); ok {
		return s.Value
	}
	return ""
}

func avType(av types.AttributeValue) string {
	switch av.(type) {
	case nil:
		return "missing"
	case *types.AttributeValueMemberS:
		return "a string"
	case *types.AttributeValueMemberN:
		return "a number"
	case *types.AttributeValueMemberB:
		return "binary"
	case *types.AttributeValueMemberBOOL:
		return "a boolean"
	case *types.AttributeValueMemberNULL:
		return "null"
	case *types.AttributeValueMemberSS:
		return "a string set"
	case *types.AttributeValueMemberNS:
		return "a number set"
	case *types.AttributeValueMemberBS:
		return "a binary set"
	case *types.AttributeValueMemberL:
		return "a list"
	case *types.AttributeValueMemberM:
		return "a map"
	}
	return fmt.Sprintf("%T", av)
}
