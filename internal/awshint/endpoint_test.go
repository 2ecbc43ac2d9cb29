package awshint_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease/internal/awshint"
	"github.com/shardlease/shardlease/internal/emulator"
)

// env is an environment of its own, so that tests run in parallel.
func env(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
}

// listShardsAt calls ListShards on a client of endpoint and returns the
// error.
func listShardsAt(t *testing.T, endpoint string) error {
	t.Helper()
	_, err := emulator.NewKinesisClient(endpoint).ListShards(t.Context(), &kinesis.ListShardsInput{StreamName: aws.String("orders")})
	require.Error(t, err)
	return err
}

func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	require.NoError(t, l.Close())
	return "http://" + l.Addr().String()
}

// The SDK's errors for an endpoint that is not the service are found,
// with the endpoint the call went to.
func TestMistakeUnreachableEndpointsAreFound(t *testing.T) {
	t.Parallel()
	html := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNotFound)
		_, _ = fmt.Fprint(w, "<html>Not Found</html>")
	}))
	t.Cleanup(html.Close)
	refused := closedPort(t)
	for _, tc := range []struct{ name, endpoint, cause string }{
		{"refused", refused, "connection refused: nothing listens there"},
		{"no such host", "http://kinesis.no-such-host.invalid:4567", "host kinesis.no-such-host.invalid not found"},
		{"not the service", html.URL, "it answered HTTP 404 with a body that is not the service's JSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := listShardsAt(t, tc.endpoint)
			u, ok := awshint.FindUnreachable(err)
			require.True(t, ok, "%v", err)
			assert.Equal(t, tc.endpoint, u.Endpoint)
			assert.Contains(t, u.Cause, tc.cause)
			assert.Equal(t, "Kinesis", awshint.ServiceOf(err))
		})
	}
	for _, err := range []error{nil, context.DeadlineExceeded, errors.New("throttled")} {
		_, ok := awshint.FindUnreachable(err)
		assert.False(t, ok, "%v", err)
	}
}

// A 5xx page that is not the service's JSON, as a load balancer or proxy in
// front of the service answers while the service restarts, is a passing
// fault, not an endpoint that is not the service.
func TestMistakeProxyServerErrorIsNotUnreachable(t *testing.T) {
	t.Parallel()
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusBadGateway)
		_, _ = fmt.Fprint(w, "<html>502 Bad Gateway</html>")
	}))
	t.Cleanup(proxy.Close)
	_, err := emulator.NewKinesisClient(proxy.URL, func(o *kinesis.Options) { o.RetryMaxAttempts = 1 }).
		ListShards(t.Context(), &kinesis.ListShardsInput{StreamName: aws.String("orders")})
	require.Error(t, err)
	_, ok := awshint.FindUnreachable(err)
	assert.False(t, ok, "%v", err)
}

// The hint names the variable that sent the call where it went, and what
// to set instead: the generic AWS_ENDPOINT_URL sends Kinesis to DynamoDB's
// emulator, a service's own variable points at a port nothing serves, the
// endpoint set in code, or AWS's own.
func TestMistakeEndpointHintNamesTheVariable(t *testing.T) {
	t.Parallel()
	const at = "http://127.0.0.1:8000"
	u := awshint.Unreachable{Endpoint: at, Cause: "connection refused: nothing listens there"}
	for _, tc := range []struct {
		name  string
		vars  map[string]string
		u     awshint.Unreachable
		parts []string
	}{
		{"generic variable", map[string]string{"AWS_ENDPOINT_URL": at + "/"}, u, []string{
			"cannot reach Kinesis at " + at + ": connection refused: nothing listens there; ",
			"AWS_ENDPOINT_URL is " + at + "/ and AWS_ENDPOINT_URL_KINESIS is not set, so Kinesis calls go there too",
			"set AWS_ENDPOINT_URL_KINESIS to Kinesis's address and AWS_ENDPOINT_URL_DYNAMODB to DynamoDB's (http://127.0.0.1:4567 and http://127.0.0.1:8000 for `shardlease emulators`), and unset AWS_ENDPOINT_URL",
		}},
		{"own variable", map[string]string{"AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_ENDPOINT_URL_KINESIS": at}, u, []string{
			"AWS_ENDPOINT_URL_KINESIS is " + at + ": start Kinesis there (`shardlease emulators` serves it at http://127.0.0.1:4567), or set AWS_ENDPOINT_URL_KINESIS to where Kinesis listens, or unset it",
		}},
		{"set in code", map[string]string{"AWS_ENDPOINT_URL_KINESIS": "http://127.0.0.1:9"}, u, []string{
			"the endpoint was set in code (the client's BaseEndpoint) or in the shared config file (endpoint_url): point it at Kinesis, or set AWS_ENDPOINT_URL_KINESIS",
		}},
		{"AWS", nil, awshint.Unreachable{Endpoint: "https://kinesis.eu-west-9.amazonaws.com", Cause: "host kinesis.eu-west-9.amazonaws.com not found"}, []string{
			"this is AWS's own endpoint for the region: check AWS_REGION",
		}},
	} {
		hint := awshint.EndpointHint(awshint.Kinesis, tc.u, env(tc.vars))
		for _, p := range tc.parts {
			assert.Contains(t, hint, p, tc.name)
		}
	}
}
