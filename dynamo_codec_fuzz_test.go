package shardlease

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// FuzzDecodeLease checks that no attribute map makes decodeLease panic, that
// every failure matches ErrCorruptLease and says what to do, and that every
// lease it accepts is sound and survives a round trip through the row
// layout.
//
// The fuzz input is the map as DynamoDB JSON, e.g.
// {"lease_key":{"S":"orders:shardId-0"},"lease_counter":{"N":"3"}}; inputs
// that are not such JSON are skipped.
func FuzzDecodeLease(f *testing.F) {
	// More seeds are in testdata/fuzz/FuzzDecodeLease.
	f.Add([]byte(`{"lease_key":{"S":"orders:shardId-000000000000"},"lease_counter":{"N":"0"}}`))
	f.Add([]byte(`{"lease_key":{"S":"orders:shardId-000000000000"},"lease_counter":{"N":"4"},"lease_owner":{"S":"a"},"lease_session":{"S":"orders:@a"},"session_gen":{"N":"7"},"lease_duration":{"S":"session"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		item, ok := itemFromJSON(data)
		if !ok {
			t.Skip("not an attribute map")
		}
		l, err := decodeLease(item)
		if err != nil {
			if !errors.Is(err, ErrCorruptLease) {
				t.Fatalf("error does not match ErrCorruptLease: %v", err)
			}
			msg := err.Error()
			if !strings.Contains(msg, "delete the row") && !strings.Contains(msg, "fix") {
				t.Fatalf("error does not say what to do: %v", err)
			}
			if !reflect.DeepEqual(l, Lease{}) {
				t.Fatalf("error %v with lease %+v", err, l)
			}
			return
		}
		if err := l.Key.Validate(); err != nil {
			t.Fatalf("decoded an invalid key %+v: %v", l.Key, err)
		}
		if l.Counter < 0 || l.SubSequence < -1 {
			t.Fatalf("decoded counter %d, sub-sequence %d", l.Counter, l.SubSequence)
		}
		if l.Checkpoint != "" {
			if err := validCheckpoint(l.Checkpoint, l.SubSequence); err != nil {
				t.Fatalf("decoded checkpoint %q: %v", l.Checkpoint, err)
			}
		}
		again, err := decodeLease(encodeLease(l))
		if err != nil {
			t.Fatalf("re-encoded lease %+v does not decode: %v", l, err)
		}
		if !reflect.DeepEqual(l, again) {
			t.Fatalf("round trip changed the lease:\n got %+v\nwant %+v", again, l)
		}
	})
}

// encodeLease writes l in the row layout the store's writes produce, with
// the codec's own encoders, so that the round trip checks them too.
func encodeLease(l Lease) map[string]types.AttributeValue {
	item := newRowItem(l.Key, l.Parents, l.Start)
	item[attrCounter] = num(l.Counter)
	delete(item, attrIncarnation) // newRowItem makes a fresh one
	if l.incarnation != "" {
		item[attrIncarnation] = str(l.incarnation)
	}
	if l.fenceEpoch != 0 {
		item[attrFenceEpoch] = num(l.fenceEpoch)
	}
	if l.Owner != "" {
		item[attrOwner] = str(l.Owner)
	}
	if l.Checkpoint != "" {
		item[attrCheckpoint] = str(l.Checkpoint)
	}
	if l.SubSequence >= 0 {
		item[attrSubSequence] = num(l.SubSequence)
	}
	if !l.Expiry.IsZero() {
		item[attrExpiry] = expiryAttr(l.Expiry)
	}
	if l.HandoffTo != "" {
		item[attrHandoff] = str(l.HandoffTo)
	}
	if l.Note != "" {
		item[attrNote] = str(l.Note)
	}
	if l.Duration != 0 {
		item[attrDuration] = durationAttr(l.Duration)
	}
	if l.Session != "" {
		stream, owner, _ := strings.Cut(l.Session, ":"+workerMark)
		vals := map[string]types.AttributeValue{}
		sessionRecordSet(vals, Worker{Stream: stream, Owner: owner, Gen: l.SessionGen}, l.Duration)
		item[attrSession], item[attrSessionGen], item[attrDuration] = vals[":sess"], vals[":sgen"], vals[":sdur"]
	}
	return item
}

// itemFromJSON reads an attribute map in DynamoDB JSON: each value an
// object with one key naming its type (S, N, B, BOOL, NULL, SS, NS, BS, L,
// M). B and BS hold base64; anything that does not fit reports false.
func itemFromJSON(data []byte) (map[string]types.AttributeValue, bool) {
	var raw map[string]json.RawMessage
	if json.Unmarshal(data, &raw) != nil {
		return nil, false
	}
	return attrMap(raw, 0)
}

func attrMap(raw map[string]json.RawMessage, depth int) (map[string]types.AttributeValue, bool) {
	out := make(map[string]types.AttributeValue, len(raw))
	for name, v := range raw {
		av, ok := attrValue(v, depth)
		if !ok {
			return nil, false
		}
		out[name] = av
	}
	return out, true
}

func attrValue(data json.RawMessage, depth int) (types.AttributeValue, bool) {
	if depth > 8 {
		return nil, false
	}
	var typed map[string]json.RawMessage
	if json.Unmarshal(data, &typed) != nil || len(typed) != 1 {
		return nil, false
	}
	for typ, v := range typed {
		switch typ {
		case "S", "N":
			var s string
			if json.Unmarshal(v, &s) != nil {
				// Let numbers through unquoted, too: {"N": 3}.
				var n json.Number
				if typ != "N" || json.Unmarshal(v, &n) != nil {
					return nil, false
				}
				s = n.String()
			}
			if typ == "S" {
				return &types.AttributeValueMemberS{Value: s}, true
			}
			return &types.AttributeValueMemberN{Value: s}, true
		case "B":
			var s string
			if json.Unmarshal(v, &s) != nil {
				return nil, false
			}
			b, err := base64.StdEncoding.DecodeString(s)
			if err != nil {
				return nil, false
			}
			return &types.AttributeValueMemberB{Value: b}, true
		case "BOOL":
			var b bool
			if json.Unmarshal(v, &b) != nil {
				return nil, false
			}
			return &types.AttributeValueMemberBOOL{Value: b}, true
		case "NULL":
			return &types.AttributeValueMemberNULL{Value: true}, true
		case "SS", "NS", "BS":
			var ss []string
			if json.Unmarshal(v, &ss) != nil {
				return nil, false
			}
			switch typ {
			case "SS":
				return &types.AttributeValueMemberSS{Value: ss}, true
			case "NS":
				return &types.AttributeValueMemberNS{Value: ss}, true
			}
			var bs [][]byte
			for _, s := range ss {
				b, err := base64.StdEncoding.DecodeString(s)
				if err != nil {
					return nil, false
				}
				bs = append(bs, b)
			}
			return &types.AttributeValueMemberBS{Value: bs}, true
		case "L":
			var items []json.RawMessage
			if json.Unmarshal(v, &items) != nil {
				return nil, false
			}
			var l []types.AttributeValue
			for _, it := range items {
				av, ok := attrValue(it, depth+1)
				if !ok {
					return nil, false
				}
				l = append(l, av)
			}
			return &types.AttributeValueMemberL{Value: l}, true
		case "M":
			var m map[string]json.RawMessage
			if json.Unmarshal(v, &m) != nil {
				return nil, false
			}
			mm, ok := attrMap(m, depth+1)
			if !ok {
				return nil, false
			}
			return &types.AttributeValueMemberM{Value: mm}, true
		}
	}
	return nil, false
}
