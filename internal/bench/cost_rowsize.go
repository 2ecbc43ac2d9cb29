package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	dtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/shardlease/shardlease"
)

// packedAttr is the attribute of a session row that carries its leases'
// packed checkpoints, where the store packs them (docs/table.md); a row
// without it carries none.
const packedAttr = "session_packed"

// itemBytes returns the size DynamoDB bills an item at: each attribute's
// name and value (docs: "Item sizes and formats").
func itemBytes(item map[string]dtypes.AttributeValue) int {
	n := 0
	for name, v := range item {
		n += len(name) + valueBytes(v)
	}
	return n
}

// valueBytes returns the size of one attribute value: a string's or a
// binary's length, a number's significant digits halved plus one, a list
// or map 3 bytes plus a byte and the size of each element.
func valueBytes(v dtypes.AttributeValue) int {
	switch v := v.(type) {
	case *dtypes.AttributeValueMemberS:
		return len(v.Value)
	case *dtypes.AttributeValueMemberB:
		return len(v.Value)
	case *dtypes.AttributeValueMemberN:
		digits := strings.TrimLeft(strings.NewReplacer("-", "", ".", "").Replace(v.Value), "0")
		return (len(digits)+1)/2 + 1
	case *dtypes.AttributeValueMemberM:
		return 3 + len(v.Value) + itemBytes(v.Value)
	case *dtypes.AttributeValueMemberL:
		n := 3 + len(v.Value)
		for _, e := range v.Value {
			n += valueBytes(e)
		}
		return n
	case *dtypes.AttributeValueMemberSS:
		n := 0
		for _, s := range v.Value {
			n += len(s)
		}
		return n
	}
	return 1 // BOOL, NULL
}

// workerRowBytes returns the size of the one worker row ("stream:@owner")
// of table, and the bytes of its packed checkpoints.
func workerRowBytes(ctx context.Context, dc shardlease.DynamoDBAPI, table string) (row, packed int, err error) {
	out, err := dc.Scan(ctx, &dynamodb.ScanInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return 0, 0, fmt.Errorf("scan lease table %s for its worker row: %w", table, err)
	}
	for _, item := range out.Items {
		if k, ok := item["lease_key"].(*dtypes.AttributeValueMemberS); ok && strings.Contains(k.Value, ":@") {
			if p, ok := item[packedAttr]; ok {
				packed = len(packedAttr) + valueBytes(p)
			}
			return itemBytes(item), packed, nil
		}
	}
	return 0, 0, fmt.Errorf("lease table %s has no worker row", table)
}
