package main

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	dtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/shardlease/shardlease"
)

// unitsFake answers writes with the consumed capacity it is set to; the
// calls it does not override would panic.
type unitsFake struct {
	shardlease.DynamoDBAPI
	units float64
}

func (f unitsFake) cc() *dtypes.ConsumedCapacity {
	return &dtypes.ConsumedCapacity{CapacityUnits: aws.Float64(f.units)}
}

func (f unitsFake) PutItem(context.Context, *dynamodb.PutItemInput, ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	return &dynamodb.PutItemOutput{ConsumedCapacity: f.cc()}, nil
}

func (f unitsFake) UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	return &dynamodb.UpdateItemOutput{ConsumedCapacity: f.cc()}, nil
}

func (f unitsFake) DeleteItem(context.Context, *dynamodb.DeleteItemInput, ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	return &dynamodb.DeleteItemOutput{ConsumedCapacity: f.cc()}, nil
}

func TestRowUnitsCountsLeaseRowsOnly(t *testing.T) {
	ctx := t.Context()
	r := &rowUnits{DynamoDBAPI: unitsFake{units: 1.5}}
	key := func(k string) map[string]dtypes.AttributeValue {
		return map[string]dtypes.AttributeValue{"lease_key": &dtypes.AttributeValueMemberS{Value: k}}
	}
	if _, err := r.UpdateItem(ctx, &dynamodb.UpdateItemInput{Key: key("orders:shardId-000000000001")}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.PutItem(ctx, &dynamodb.PutItemInput{Item: key("orders:shardId-000000000002")}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.DeleteItem(ctx, &dynamodb.DeleteItemInput{Key: key("orders:shardId-000000000003")}); err != nil {
		t.Fatal(err)
	}
	// A keep of the session on the worker row is not a lease row's.
	if _, err := r.UpdateItem(ctx, &dynamodb.UpdateItemInput{Key: key("orders:@pod-0")}); err != nil {
		t.Fatal(err)
	}
	if got := r.LeaseUnits(); got != 4.5 {
		t.Errorf("lease rows' units %v, want 4.5 (three writes of 1.5, the worker row's left out)", got)
	}
}

func TestItemBytes(t *testing.T) {
	item := map[string]dtypes.AttributeValue{
		"lease_key": &dtypes.AttributeValueMemberS{Value: "ab:@c"},                                                                                   // 9 + 5
		"n":         &dtypes.AttributeValueMemberN{Value: "123"},                                                                                     // 1 + 3
		"m":         &dtypes.AttributeValueMemberM{Value: map[string]dtypes.AttributeValue{"x": &dtypes.AttributeValueMemberB{Value: []byte{1, 2}}}}, // 1 + 3 + 1 + 1 + 2
	}
	if got := itemBytes(item); got != 26 {
		t.Errorf("itemBytes = %d, want 26", got)
	}
}
