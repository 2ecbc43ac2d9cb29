package soak

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// EvDeleteFinished is an operator deleting, by hand and without any
// condition, the row of a finished shard that Kinesis still lists, once every
// child has started: the row must not be made again and read a second time,
// and nothing may be lost.
const EvDeleteFinished = "operator deleted a finished row (shard still listed)"

// deleteFinished deletes one finished row whose children have all started,
// trying again every lease duration until one exists or ctx ends.
func (s *soak) deleteFinished(ctx context.Context) {
	t := time.NewTicker(s.cfg.Lease)
	defer t.Stop()
	for {
		if deleted, err := s.deleteOneFinished(ctx); err != nil {
			fmt.Fprintf(s.cfg.Events, "%6.1fs operator: %v\n", s.since(), err)
		} else if deleted != "" {
			s.counts.add(EvDeleteFinished, 1)
			fmt.Fprintf(s.cfg.Events, "%6.1fs operator deleted the finished row of %s\n", s.since(), deleted)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *soak) deleteOneFinished(ctx context.Context) (string, error) {
	rows, err := s.memoryOrDynamo().List(ctx, s.cfg.Stream)
	if err != nil {
		return "", err
	}
	for _, l := range rows {
		if !l.Finished() {
			continue
		}
		children := 0
		started := true
		for _, c := range rows {
			if slices.Contains(c.Parents, l.Key.Shard) {
				children++
				started = started && c.Checkpoint != ""
			}
		}
		if children == 0 || !started {
			continue
		}
		// A row made again is a new generation: the audit learns of the
		// deletion once it happened (through auditDynamo on DynamoDB).
		if s.memory != nil {
			if s.memory.Delete(l.Key) {
				s.audit.deleted(l.Key.String())
			}
			return l.Key.Shard, nil
		}
		audited := &auditDynamo{DynamoDBAPI: s.cfg.Dynamo, a: s.audit, by: operator}
		_, err := audited.DeleteItem(ctx, &dynamodb.DeleteItemInput{
			TableName: aws.String(s.cfg.Table),
			Key:       map[string]types.AttributeValue{"lease_key": &types.AttributeValueMemberS{Value: l.Key.String()}},
		})
		if err != nil {
			return "", fmt.Errorf("delete the row of %s: %w", l.Key, err)
		}
		return l.Key.Shard, nil
	}
	return "", nil
}
