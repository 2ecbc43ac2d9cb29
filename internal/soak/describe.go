package soak

// Workers that cannot describe the stream: during an IAM rollout some
// workers of a fleet may call DescribeStreamSummary and some are refused
// (AccessDeniedException); a client wrapper may not have the call at all.
// The stream's creation time, which the fence token leads with, is then
// known to some workers and not to others, and every token of a later
// holding must still compare above every earlier one's, whichever worker
// holds it. Each incarnation of a slot draws one of the three kinds from
// its slot and generation, so a slot changes kind across its restarts and
// every run mixes all three.
//
// Enhanced fan-out needs DescribeStreamSummary (the consumer refuses a
// client without it, and registering the stream consumer calls it), so in
// the fan-out mode the workers that cannot describe read by polling, as
// the part of a fleet a rollout has not reached yet would.

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	kinesistypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/shardlease/shardlease"
)

// Event kinds of the workers that cannot describe the stream.
const (
	EvDescribeDenied = "worker refused DescribeStreamSummary (AccessDenied)"
	EvNoDescribe     = "worker whose client has no DescribeStreamSummary"
)

// describeKind is what an incarnation's Kinesis client does with
// DescribeStreamSummary.
type describeKind int

const (
	describes       describeKind = iota // passed on, with the faults
	describeDenied                      // fails with AccessDeniedException
	describeMissing                     // the client has no such method
)

// describeOf returns the kind of the incarnation gen of slot.
func describeOf(slot, gen int) describeKind { return describeKind((slot + gen) % 3) }

// describingKinesis adds DescribeStreamSummary to faultKinesis, with the
// same faults.
type describingKinesis struct {
	*faultKinesis
	d shardlease.StreamDescriber
}

func (k *describingKinesis) DescribeStreamSummary(ctx context.Context, p *kinesis.DescribeStreamSummaryInput, o ...func(*kinesis.Options)) (*kinesis.DescribeStreamSummaryOutput, error) {
	return kinesisCall(k.in, "DescribeStreamSummary", func() (*kinesis.DescribeStreamSummaryOutput, error) {
		return k.d.DescribeStreamSummary(ctx, p, o...)
	})
}

// deniedKinesis is faultKinesis whose DescribeStreamSummary is refused, as
// for a role not allowed kinesis:DescribeStreamSummary.
type deniedKinesis struct{ *faultKinesis }

func (k *deniedKinesis) DescribeStreamSummary(ctx context.Context, p *kinesis.DescribeStreamSummaryInput, o ...func(*kinesis.Options)) (*kinesis.DescribeStreamSummaryOutput, error) {
	if err := k.in.down(); err != nil {
		return nil, err
	}
	k.in.counts.add("kinesis DescribeStreamSummary refused (AccessDenied)", 1)
	return nil, opError("Kinesis", "DescribeStreamSummary", httpError(400, &kinesistypes.AccessDeniedException{
		Message: aws.String("User is not authorized to perform: kinesis:DescribeStreamSummary on resource " + aws.ToString(p.StreamName)),
	}))
}

// kinesisFor returns the Kinesis client of an incarnation of slot gen, with
// its faults, and the reading mode's options: fan-out when the config asks
// for it and the incarnation can describe the stream, polling otherwise.
func (s *soak) kinesisFor(fk *faultKinesis, slot, gen int) (shardlease.KinesisAPI, []shardlease.Option) {
	kind := describeOf(slot, gen)
	switch kind {
	case describeDenied:
		s.counts.add(EvDescribeDenied, 1)
		return &deniedKinesis{fk}, nil
	case describeMissing:
		s.counts.add(EvNoDescribe, 1)
		return fk, nil
	}
	if s.cfg.FanOut != "" {
		return &faultFanOut{faultKinesis: fk, fo: s.cfg.Kinesis.(shardlease.FanOutAPI)}, []shardlease.Option{shardlease.WithEnhancedFanOut(s.cfg.FanOut)}
	}
	return &describingKinesis{faultKinesis: fk, d: s.cfg.Kinesis.(shardlease.StreamDescriber)}, nil
}
