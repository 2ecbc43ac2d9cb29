package main

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/shardlease/shardlease"
)

// The environment variables the service reads; deployment.yaml sets them and
// its test checks that it sets no other. Region, credentials and endpoints
// come from the AWS SDK's own variables (AWS_REGION,
// AWS_ENDPOINT_URL_DYNAMODB, AWS_ENDPOINT_URL_KINESIS, ...).
const (
	envTable    = "LEASE_TABLE"
	envStream   = "STREAM"
	envPodName  = "POD_NAME"
	envLease    = "LEASE_DURATION"
	envShutdown = "SHUTDOWN_TIMEOUT"
	envAddr     = "HTTP_ADDR"
)

// envNames lists every variable above, for the manifests' test.
var envNames = []string{envTable, envStream, envPodName, envLease, envShutdown, envAddr}

// Defaults of the optional variables. The two timings are the library's own
// defaults, passed explicitly so that stopBudget counts what the consumer
// runs with.
const (
	defaultLease    = 10 * time.Second
	defaultShutdown = 10 * time.Second
	defaultAddr     = ":8080"
)

// settings are the service's configuration, read from the environment.
type settings struct {
	table, stream string
	// owner is POD_NAME; empty when it is not set, and the library then
	// names the worker after its host name.
	owner                   string
	leaseDuration, shutdown time.Duration
	addr                    string
}

// loadSettings reads the environment through getenv. Every problem it finds
// is reported, each naming its variable and what to set.
func loadSettings(getenv func(string) string) (settings, error) {
	s := settings{
		table:  strings.TrimSpace(getenv(envTable)),
		stream: strings.TrimSpace(getenv(envStream)),
		owner:  strings.TrimSpace(getenv(envPodName)),
		addr:   strings.TrimSpace(getenv(envAddr)),
	}
	var errs []error
	switch err := shardlease.ValidateTableName(s.table); {
	case s.table == "":
		errs = append(errs, fmt.Errorf("%s is not set: set it to the DynamoDB table of the leases (create it with `shardlease create-table -table NAME`)", envTable))
	case err != nil:
		errs = append(errs, fmt.Errorf("%s=%q is not a DynamoDB table name: %w", envTable, s.table, err))
	}
	switch err := shardlease.ValidateStreamName(s.stream); {
	case s.stream == "":
		errs = append(errs, fmt.Errorf("%s is not set: set it to the name of the Kinesis stream to consume", envStream))
	case strings.HasPrefix(s.stream, "arn:"):
		errs = append(errs, fmt.Errorf("%s=%q is an ARN: set it to the stream's name, the part after \"stream/\"", envStream, s.stream))
	case err != nil:
		errs = append(errs, fmt.Errorf("%s=%q is not a Kinesis stream name: %w", envStream, s.stream, err))
	}
	var err error
	if s.leaseDuration, err = duration(getenv, envLease, defaultLease); err != nil {
		errs = append(errs, err)
	}
	if s.shutdown, err = duration(getenv, envShutdown, defaultShutdown); err != nil {
		errs = append(errs, err)
	}
	if s.addr == "" {
		s.addr = defaultAddr
	} else if _, _, err := net.SplitHostPort(s.addr); err != nil {
		errs = append(errs, fmt.Errorf("%s=%q: want host:port, such as :8080 (%w)", envAddr, s.addr, err))
	}
	if len(errs) > 0 {
		return s, fmt.Errorf("configuration: %w", errors.Join(errs...))
	}
	return s, nil
}

// duration reads an optional positive duration from the variable name.
func duration(getenv func(string) string, name string, def time.Duration) (time.Duration, error) {
	v := strings.TrimSpace(getenv(name))
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s=%q is not a positive duration: write it with its unit, such as %v, or unset it for that default", name, v, def)
	}
	return d, nil
}

// consumerOptions are the library options the settings ask for.
func (s settings) consumerOptions() []shardlease.Option {
	opts := []shardlease.Option{
		shardlease.WithLeaseDuration(s.leaseDuration),
		shardlease.WithShutdownTimeout(s.shutdown),
	}
	if s.owner != "" {
		opts = append(opts, shardlease.WithOwnerID(s.owner))
	}
	return opts
}

// httpShutdown bounds the HTTP server's graceful stop, the last step of a
// stop.
const httpShutdown = 5 * time.Second

// stopBudget is the longest a stop takes from SIGTERM to exit: the drain
// (drainWait), Run's shutdown, at most the shutdown timeout (at once when
// the drain finished), and the HTTP server's stop. The Deployment's
// terminationGracePeriodSeconds must cover it; its test checks that.
func (s settings) stopBudget() time.Duration {
	return s.drainWait() + s.shutdown + httpShutdown
}

// drainWait bounds the wait for Consumer.Drain: the drain itself is bounded
// by the shutdown timeout, and a lease duration more leaves the worker's
// loop time to take the request up between two of its steps.
func (s settings) drainWait() time.Duration {
	return s.leaseDuration + s.shutdown
}
