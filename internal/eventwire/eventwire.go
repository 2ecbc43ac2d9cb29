// Package eventwire writes SubscribeToShard responses in the event-stream
// wire encoding the Kinesis service uses (application/vnd.amazon.eventstream),
// with the SDK's own encoder: the initial-response event, SubscribeToShardEvent
// events and exceptions. The in-process Kinesis fake and the emulator harness
// serve subscriptions with it, so that a real *kinesis.Client decodes them.
package eventwire

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// ContentType is the content type of an event-stream response.
const ContentType = "application/vnd.amazon.eventstream"

func write(w io.Writer, headers eventstream.Headers, payload []byte) error {
	return eventstream.NewEncoder().Encode(w, eventstream.Message{Headers: headers, Payload: payload})
}

// WriteInitialResponse writes the initial-response event a client expects
// first (the SDK fails the call without it).
func WriteInitialResponse(w io.Writer) error {
	return write(w, eventstream.Headers{
		{Name: ":message-type", Value: eventstream.StringValue("event")},
		{Name: ":event-type", Value: eventstream.StringValue("initial-response")},
		{Name: ":content-type", Value: eventstream.StringValue("application/json")},
	}, []byte("{}"))
}

// WriteEvent writes one SubscribeToShardEvent whose JSON payload is payload.
func WriteEvent(w io.Writer, payload []byte) error {
	return write(w, eventstream.Headers{
		{Name: ":message-type", Value: eventstream.StringValue("event")},
		{Name: ":event-type", Value: eventstream.StringValue("SubscribeToShardEvent")},
		{Name: ":content-type", Value: eventstream.StringValue("application/json")},
	}, payload)
}

// WriteException writes an exception event, which ends the subscription with
// the typed error excType (a Kinesis exception name such as
// "InternalFailureException") on the client's side.
func WriteException(w io.Writer, excType, message string) error {
	b, _ := json.Marshal(map[string]string{"message": message})
	return write(w, eventstream.Headers{
		{Name: ":message-type", Value: eventstream.StringValue("exception")},
		{Name: ":exception-type", Value: eventstream.StringValue(excType)},
		{Name: ":content-type", Value: eventstream.StringValue("application/json")},
	}, b)
}

type record struct {
	SequenceNumber              string  `json:"SequenceNumber"`
	ApproximateArrivalTimestamp float64 `json:"ApproximateArrivalTimestamp"`
	Data                        string  `json:"Data"`
	PartitionKey                string  `json:"PartitionKey"`
	EncryptionType              string  `json:"EncryptionType,omitempty"`
}

type hashKeyRange struct {
	StartingHashKey string `json:"StartingHashKey"`
	EndingHashKey   string `json:"EndingHashKey"`
}

type childShard struct {
	ShardId      string       `json:"ShardId"`
	ParentShards []string     `json:"ParentShards"`
	HashKeyRange hashKeyRange `json:"HashKeyRange"`
}

type event struct {
	Records                    []record     `json:"Records"`
	ContinuationSequenceNumber *string      `json:"ContinuationSequenceNumber,omitempty"`
	MillisBehindLatest         int64        `json:"MillisBehindLatest"`
	ChildShards                []childShard `json:"ChildShards,omitempty"`
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// EventJSON is the JSON payload of ev as the service sends it: data in
// base64, timestamps in epoch seconds.
func EventJSON(ev types.SubscribeToShardEvent) []byte {
	e := event{Records: make([]record, 0, len(ev.Records)), ContinuationSequenceNumber: ev.ContinuationSequenceNumber}
	if ev.MillisBehindLatest != nil {
		e.MillisBehindLatest = *ev.MillisBehindLatest
	}
	for _, r := range ev.Records {
		ts := 0.0
		if r.ApproximateArrivalTimestamp != nil {
			ts = float64(r.ApproximateArrivalTimestamp.UnixMilli()) / float64(time.Second/time.Millisecond)
		}
		e.Records = append(e.Records, record{
			SequenceNumber: deref(r.SequenceNumber), ApproximateArrivalTimestamp: ts,
			Data: base64.StdEncoding.EncodeToString(r.Data), PartitionKey: deref(r.PartitionKey),
			EncryptionType: string(r.EncryptionType),
		})
	}
	for _, c := range ev.ChildShards {
		cs := childShard{ShardId: deref(c.ShardId), ParentShards: c.ParentShards}
		if c.HashKeyRange != nil {
			cs.HashKeyRange = hashKeyRange{deref(c.HashKeyRange.StartingHashKey), deref(c.HashKeyRange.EndingHashKey)}
		}
		e.ChildShards = append(e.ChildShards, cs)
	}
	b, err := json.Marshal(e)
	if err != nil {
		panic(err) // the payload types always marshal
	}
	return b
}
