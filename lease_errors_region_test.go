package shardlease_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/shardleasetest"
)

// A client without a region is flagged by the constructors, before any
// call, with what to set.
func TestNoRegionIsFlaggedBeforeAnyCall(t *testing.T) {
	t.Parallel()
	_, err := shardlease.NewDynamoStore(dynamodb.New(dynamodb.Options{}), "orders-leases")
	requirePrefixOnce(t, err, shardlease.ErrInvalidConfig)
	require.ErrorContains(t, err, "table orders-leases: invalid configuration: the DynamoDB client has no AWS region: set AWS_REGION")

	err = shardlease.CreateTable(t.Context(), dynamodb.New(dynamodb.Options{}), "orders-leases")
	requirePrefixOnce(t, err, shardlease.ErrInvalidConfig)
	require.ErrorContains(t, err, "no AWS region")

	_, err = shardlease.NewConsumer(kinesis.New(kinesis.Options{}), shardlease.NewMemoryStore(), "orders", nopHandler)
	requirePrefixOnce(t, err, shardlease.ErrInvalidConfig)
	require.ErrorContains(t, err, "stream orders: invalid configuration: the Kinesis client has no AWS region: set AWS_REGION")
	require.ErrorContains(t, err, "for local emulators any region will do")

	// With a region, and for clients that are not the SDK's, nothing is flagged.
	_, err = shardlease.NewDynamoStore(dynamodb.New(dynamodb.Options{Region: "eu-west-1"}), "orders-leases")
	require.NoError(t, err)
	_, err = shardlease.NewConsumer(shardleasetest.NewKinesis(), shardlease.NewMemoryStore(), "orders", nopHandler)
	require.NoError(t, err)
}

// With no credentials anywhere, Run's error says what to set, ahead of the
// SDK's own text. Not parallel: it sets the process's environment.
func TestNoCredentialsSaysWhatToDo(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "config"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "credentials"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true") // no instance metadata lookup
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_PROFILE",
		"AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"} {
		t.Setenv(k, "")
		require.NoError(t, os.Unsetenv(k))
	}
	cfg, err := config.LoadDefaultConfig(t.Context(), config.WithRegion("us-east-1"))
	require.NoError(t, err)
	nowhere := aws.String("http://127.0.0.1:1") // never reached: signing fails first
	store, err := shardlease.NewDynamoStore(dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) { o.BaseEndpoint = nowhere }), "orders-leases")
	require.NoError(t, err)
	c, err := shardlease.NewConsumer(kinesis.NewFromConfig(cfg, func(o *kinesis.Options) { o.BaseEndpoint = nowhere }), store, "orders", nopHandler)
	require.NoError(t, err)
	err = c.Run(t.Context())
	require.Error(t, err)
	msg := err.Error()
	require.True(t, strings.HasPrefix(msg, "shardlease: stream orders: table orders-leases: describe: no AWS credentials were found: "), msg)
	require.Contains(t, msg, "AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local")
	require.Equal(t, 1, strings.Count(msg, "shardlease: "), msg)
}
