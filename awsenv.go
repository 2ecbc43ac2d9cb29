package shardlease

import (
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/shardlease/shardlease/internal/awshint"
)

// checkRegion fails when client is an SDK client (or anything that reports
// the SDK's options) without a region, before any call is made: the SDK
// would fail every call later, and only after looking for credentials.
// Other implementations (wrappers, fakes) are not checked.
func checkRegion(client any) error {
	var service, region string
	switch c := client.(type) {
	case interface{ Options() dynamodb.Options }:
		service, region = "DynamoDB", c.Options().Region
	case interface{ Options() kinesis.Options }:
		service, region = "Kinesis", c.Options().Region
	default:
		return nil
	}
	if region != "" {
		return nil
	}
	return errorf("%w: the %s client has no AWS region: %s", ErrInvalidConfig, service, awshint.NoRegion)
}

// credentialsHint puts what to do in front of an error that says the SDK
// found no credentials, and returns any other error as it is.
func credentialsHint(err error) error {
	if !awshint.IsNoCredentials(err) {
		return err
	}
	return errorf("%s: %w", awshint.NoCredentials, err)
}
