package main

import (
	"context"
	"fmt"
	"slices"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/shardlease/shardlease"
)

// keyAttr is the lease table's hash key attribute.
const keyAttr = "lease_key"

// scanner is the part of the DynamoDB client tableStreams calls.
type scanner interface {
	Scan(ctx context.Context, params *dynamodb.ScanInput, optFns ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
}

// tableStreams returns the names of the streams with lease rows in table,
// sorted, from one consistent Scan of the keys. A lease row's key is
// "stream:shard"; keys that are not (bare keys of an older layout without a
// colon, worker rows "name:@owner", identity rows "stream:#identity", keys
// of other layouts) name no stream.
func tableStreams(ctx context.Context, client scanner, table string) ([]string, error) {
	seen := map[string]bool{}
	var start map[string]types.AttributeValue
	for {
		page, err := client.Scan(ctx, &dynamodb.ScanInput{
			TableName:                aws.String(table),
			ConsistentRead:           aws.Bool(true),
			ProjectionExpression:     aws.String("#k"),
			ExpressionAttributeNames: map[string]string{"#k": keyAttr},
			ExclusiveStartKey:        start,
		})
		if err != nil {
			return nil, fmt.Errorf("list the streams of table %s: %w", table, err)
		}
		for _, item := range page.Items {
			k, ok := item[keyAttr].(*types.AttributeValueMemberS)
			if !ok {
				continue
			}
			if key, err := shardlease.ParseLeaseKey(k.Value); err == nil {
				seen[key.Stream] = true
			}
		}
		if len(page.LastEvaluatedKey) == 0 {
			break
		}
		start = page.LastEvaluatedKey
	}
	streams := make([]string, 0, len(seen))
	for s := range seen {
		streams = append(streams, s)
	}
	slices.Sort(streams)
	return streams, nil
}
