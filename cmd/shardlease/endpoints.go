package main

// This file holds the AWS side of every command: which services a command
// calls, the flags that point each one at an endpoint, the clients, and the
// hint added to an error when an endpoint cannot be reached.
//
// Each service has one flag name across all commands: -dynamodb-endpoint
// and -kinesis-endpoint. The older -endpoint meant DynamoDB for the commands
// that call DynamoDB and Kinesis for the others; it keeps that meaning per
// command, as a deprecated alias that says which flag replaces it.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/smithy-go"

	"github.com/shardlease/shardlease/internal/awshint"
)

// services are the AWS services a command calls. The zero value is
// DynamoDB alone, what most commands call.
type services uint8

const (
	dynamoOnly services = iota
	kinesisOnly
	dynamoAndKinesis
	noService
)

func (s services) dynamo() bool  { return s == dynamoOnly || s == dynamoAndKinesis }
func (s services) kinesis() bool { return s == kinesisOnly || s == dynamoAndKinesis }

// endpointFlag describes one service's endpoint flag.
type endpointFlag struct {
	flag, service, variable, example string
}

var (
	dynamoFlag  = endpointFlag{"dynamodb-endpoint", "DynamoDB", "AWS_ENDPOINT_URL_DYNAMODB", "http://127.0.0.1:8000"}
	kinesisFlag = endpointFlag{"kinesis-endpoint", "Kinesis", "AWS_ENDPOINT_URL_KINESIS", "http://127.0.0.1:4567"}
)

// legacyEndpoint is the flag whose meaning the deprecated -endpoint keeps
// in c: DynamoDB's where c calls DynamoDB, Kinesis's otherwise.
func legacyEndpoint(c *command) endpointFlag {
	if c.calls.dynamo() {
		return dynamoFlag
	}
	return kinesisFlag
}

// addAWSFlags defines -region and the endpoint flags of the services c
// calls on fs.
func addAWSFlags(fs *flag.FlagSet, c *command, st *cli) {
	if c.calls == noService {
		return
	}
	fs.StringVar(&st.region, "region", "", "AWS `region` (default: from AWS_REGION or the shared config)")
	for _, ef := range []endpointFlag{dynamoFlag, kinesisFlag} {
		if (ef == dynamoFlag && !c.calls.dynamo()) || (ef == kinesisFlag && !c.calls.kinesis()) {
			continue
		}
		fs.StringVar(st.endpointOf(ef), ef.flag, "", fmt.Sprintf("%s endpoint `URL`, e.g. %s for a local emulator (default: from %s, AWS_ENDPOINT_URL, or the region's)",
			ef.service, ef.example, ef.variable))
	}
	fs.StringVar(&st.oldEndpoint, "endpoint", "", fmt.Sprintf("deprecated, the old name of -%[1]s: give the endpoint `URL` with -%[1]s", legacyEndpoint(c).flag))
}

// endpointOf returns where the value of ef's flag is kept.
func (st *cli) endpointOf(ef endpointFlag) *string {
	if ef == dynamoFlag {
		return &st.dynamoEndpoint
	}
	return &st.kinesisEndpoint
}

// applyOldEndpoint gives a -endpoint its old meaning in c, with a notice on
// standard error that names the flag replacing it.
func (st *cli) applyOldEndpoint(c *command) error {
	if st.oldEndpoint == "" {
		return nil
	}
	ef := legacyEndpoint(c)
	target := st.endpointOf(ef)
	if *target != "" && *target != st.oldEndpoint {
		return usagef("-endpoint %s and -%s %s: -endpoint is the old name of -%s here; give only -%s", st.oldEndpoint, ef.flag, *target, ef.flag, ef.flag)
	}
	*target = st.oldEndpoint
	fmt.Fprintf(st.stderr, "shardlease %s: -endpoint is deprecated; use -%s (the %s endpoint, as -endpoint meant here)\n", c.name, ef.flag, ef.service)
	return nil
}

// dynamo returns a DynamoDB client built from the SDK's default
// configuration, with -region and -dynamodb-endpoint applied, and keeps it
// in st.ddb.
func (st *cli) dynamo(ctx context.Context) (*dynamodb.Client, error) {
	cfg, err := st.awsConfig(ctx)
	if err != nil {
		return nil, err
	}
	st.ddb = dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
		if st.dynamoEndpoint != "" {
			o.BaseEndpoint = aws.String(st.dynamoEndpoint)
		}
	})
	return st.ddb, nil
}

// kinesisClient returns a Kinesis client built from the SDK's default
// configuration, with -region and -kinesis-endpoint applied. It shares the
// transport of a client made before it.
func (st *cli) kinesisClient(ctx context.Context) (*kinesis.Client, error) {
	cfg, err := st.awsConfig(ctx)
	if err != nil {
		return nil, err
	}
	return kinesis.NewFromConfig(cfg, func(o *kinesis.Options) {
		if st.kinesisEndpoint != "" {
			o.BaseEndpoint = aws.String(st.kinesisEndpoint)
		}
	}), nil
}

// withCredentialsHint adds what to do to an error that says the SDK found
// no credentials.
func withCredentialsHint(err error) error {
	if awshint.IsNoCredentials(err) {
		return fmt.Errorf("%s: %w", awshint.NoCredentials, err)
	}
	return err
}

// awsConfig loads the SDK's default configuration with -region applied.
// With an endpoint but no region it signs with us-east-1, which emulators
// ignore.
func (st *cli) awsConfig(ctx context.Context) (aws.Config, error) {
	var opts []func(*config.LoadOptions) error
	if st.region != "" {
		opts = append(opts, config.WithRegion(st.region))
	}
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return cfg, fmt.Errorf("load AWS configuration: %w", err)
	}
	// Use the transport the SDK configured (AWS_CA_BUNDLE and all), but
	// keep hold of it so its connections are closed when the command ends.
	if st.http == nil {
		if bc, ok := cfg.HTTPClient.(*awshttp.BuildableClient); ok {
			st.http = bc.GetTransport()
		}
	}
	if st.http != nil {
		cfg.HTTPClient = &http.Client{Transport: st.http}
	}
	if cfg.Region == "" {
		if st.dynamoEndpoint == "" && st.kinesisEndpoint == "" {
			return cfg, errors.New("no AWS region configured: pass -region or set AWS_REGION (for local emulators any region will do, e.g. us-east-1)")
		}
		cfg.Region = "us-east-1" // an emulator ignores it, but requests are signed with one
	}
	return cfg, nil
}

// unreachable is an error of a call whose endpoint could not be reached:
// it names the endpoint, where it was set, and what to check.
type unreachable struct {
	ef       endpointFlag
	endpoint string // "" when the region's
	from     string // the flag or variable that set it
	err      error
}

func (e *unreachable) Error() string {
	if e.endpoint == "" {
		return fmt.Sprintf("cannot reach the %s endpoint of the region: check the network and -region; for a local emulator pass -%s URL or set %s: %v",
			e.ef.service, e.ef.flag, e.ef.variable, e.err)
	}
	return fmt.Sprintf("cannot reach the %s endpoint %s (set by %s): is the emulator or proxy running there? Start local ones with 'shardlease emulators', "+
		"or fix -%s or %s (AWS_ENDPOINT_URL alone sets both services): %v", e.ef.service, e.endpoint, e.from, e.ef.flag, e.ef.variable, e.err)
}

func (e *unreachable) Unwrap() error { return e.err }

// withEndpointHint returns err with the unreachable endpoint named, when
// err is a call that could not connect (connection refused, no such host,
// timeout while dialling).
func (st *cli) withEndpointHint(err error) error {
	var op *smithy.OperationError
	if !errors.As(err, &op) || !isDialError(err) {
		return err
	}
	var ef endpointFlag
	switch op.ServiceID {
	case "DynamoDB":
		ef = dynamoFlag
	case "Kinesis":
		ef = kinesisFlag
	default:
		return err
	}
	u := &unreachable{ef: ef, err: err}
	switch {
	case *st.endpointOf(ef) != "":
		u.endpoint, u.from = *st.endpointOf(ef), "-"+ef.flag
	case os.Getenv(ef.variable) != "":
		u.endpoint, u.from = os.Getenv(ef.variable), ef.variable
	case os.Getenv("AWS_ENDPOINT_URL") != "":
		u.endpoint, u.from = os.Getenv("AWS_ENDPOINT_URL"), "AWS_ENDPOINT_URL"
	}
	return u
}

// isDialError reports whether err is a failure to open a connection.
func isDialError(err error) bool {
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return true
	}
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}
