package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

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

// errStreamNotInTable is the error of a command naming a stream of which
// the table holds no lease.
var errStreamNotInTable = errors.New("no lease of the stream in the table")

// streamNotInTable returns an error matching errStreamNotInTable that names
// the streams table does hold (the nearest first when one is near enough
// to be a typo), or says the table holds none. A consumer makes a stream's
// rows when it first syncs the stream's shards, so either -stream or the
// table (-table, -region, -dynamodb-endpoint) is wrong.
func (st *cli) streamNotInTable(ctx context.Context, table, stream string) error {
	if st.ddb == nil {
		return fmt.Errorf("table %s, stream %s: %w", table, stream, errStreamNotInTable)
	}
	streams, err := tableStreams(ctx, st.ddb, table)
	if err != nil {
		return err
	}
	if len(streams) == 0 {
		return fmt.Errorf("table %s, stream %s: %w: the table holds no lease of any stream; check -table, -region and -dynamodb-endpoint, "+
			"or run a consumer of the stream with this table first (it makes a stream's rows when it first syncs its shards)", table, stream, errStreamNotInTable)
	}
	hint := ""
	if near := nearest(stream, streams); near != "" {
		hint = fmt.Sprintf("; did you mean -stream %s?", near)
	}
	return fmt.Errorf("table %s, stream %s: %w: the table holds leases of %s only%s (check -stream, or -table if the stream's leases are in another table)",
		table, stream, errStreamNotInTable, strings.Join(firstNames(streams, 10), ", "), hint)
}

// firstNames returns the first n names, and how many more there are.
func firstNames(names []string, n int) []string {
	if len(names) <= n {
		return names
	}
	return append(slices.Clip(names[:n]), fmt.Sprintf("and %d more", len(names)-n))
}
