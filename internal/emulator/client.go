package emulator

import (
	"context"
	"net"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
)

// Region is the region every emulator client is configured with. The
// emulators ignore it, but the SDK signs requests with it.
const Region = "us-east-1"

// transport carries every request of every client this package builds. Main
// closes its idle connections before it looks for leaked goroutines, so the
// connections' read and write loops are not reported.
var transport = &http.Transport{
	// Never a proxy: the emulators are on loopback, and an HTTP_PROXY from
	// the environment must not route test traffic elsewhere.
	Proxy: nil,
	DialContext: (&net.Dialer{
		Timeout:   5 * time.Second,
		KeepAlive: 30 * time.Second,
	}).DialContext,
	MaxIdleConns:        256,
	MaxIdleConnsPerHost: 64,
	IdleConnTimeout:     30 * time.Second,
	// An emulator that stops answering fails the request (and the SDK
	// retries it) instead of hanging the test until its timeout.
	ResponseHeaderTimeout: time.Minute,
}

var httpClient = &http.Client{Transport: transport}

// credentials are fixed dummy credentials: the emulators check that requests
// are signed but not with what. A provider func (rather than the default
// chain) means no environment, profile or instance-metadata (IMDS) lookup.
var credentials = aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
	return aws.Credentials{
		AccessKeyID:     "AKIDEMULATOR",
		SecretAccessKey: "emulator-secret",
		Source:          "shardlease emulator harness",
	}, nil
})

// awsConfig is the configuration of every emulator client. It is a literal,
// not config.LoadDefaultConfig, so nothing is read from the environment or
// shared config files and nothing is fetched from the network. The SDK's
// standard retryer is kept: it retries throttling and transient errors a
// few times, which absorbs an emulator hiccup, and surfaces anything else.
func awsConfig(endpoint string) aws.Config {
	return aws.Config{
		Region:       Region,
		Credentials:  credentials,
		HTTPClient:   httpClient,
		BaseEndpoint: aws.String(endpoint),
		// The emulators have no account-scoped endpoints; with a
		// BaseEndpoint the mode does not matter, but disabling it keeps
		// the SDK from asking the credentials for an account id.
		AccountIDEndpointMode: aws.AccountIDEndpointModeDisabled,
	}
}

// NewDynamoClient returns a DynamoDB client for the emulator at endpoint
// (a Server's Endpoint), with dummy credentials and region us-east-1.
// optFns adjust the client options as with dynamodb.NewFromConfig.
func NewDynamoClient(endpoint string, optFns ...func(*dynamodb.Options)) *dynamodb.Client {
	return dynamodb.NewFromConfig(awsConfig(endpoint), optFns...)
}

// NewKinesisClient returns a Kinesis client for the emulator at endpoint
// (a Server's Endpoint), with dummy credentials and region us-east-1.
// optFns adjust the client options as with kinesis.NewFromConfig.
func NewKinesisClient(endpoint string, optFns ...func(*kinesis.Options)) *kinesis.Client {
	return kinesis.NewFromConfig(awsConfig(endpoint), optFns...)
}

// closeIdleConnections closes the idle connections of every client built by
// this package.
func closeIdleConnections() { transport.CloseIdleConnections() }
