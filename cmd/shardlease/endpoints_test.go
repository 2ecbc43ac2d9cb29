package main

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease/internal/emulator"
)

// One flag name per endpoint across the commands: -dynamodb-endpoint on
// every command that calls DynamoDB, -kinesis-endpoint on every one that
// calls Kinesis, and the old -endpoint only as a deprecated alias that
// names its replacement.
func TestMistakeEndpointFlagMeansOneServiceEverywhere(t *testing.T) {
	t.Parallel()
	for _, c := range commands {
		st := &cli{}
		fs := newFlagSet(c, st)
		c.flags(fs, st)
		d, k, old := fs.Lookup("dynamodb-endpoint"), fs.Lookup("kinesis-endpoint"), fs.Lookup("endpoint")
		assert.Equal(t, c.calls.dynamo(), d != nil, "%s: -dynamodb-endpoint", c.name)
		assert.Equal(t, c.calls.kinesis(), k != nil, "%s: -kinesis-endpoint", c.name)
		if d != nil {
			assert.Contains(t, d.Usage, "DynamoDB endpoint", c.name)
		}
		if k != nil {
			assert.Contains(t, k.Usage, "Kinesis endpoint", c.name)
		}
		if c.calls == noService {
			assert.Nil(t, old, c.name)
			continue
		}
		require.NotNil(t, old, "%s keeps -endpoint for the scripts that use it", c.name)
		assert.True(t, strings.HasPrefix(old.Usage, "deprecated, the old name of -"+legacyEndpoint(c).flag), "%s: %s", c.name, old.Usage)
	}
	assert.Equal(t, kinesisFlag, legacyEndpoint(putCommand), "-endpoint meant Kinesis for put")
	assert.Equal(t, dynamoFlag, legacyEndpoint(listCommand), "and DynamoDB for list")
	assert.Equal(t, dynamoFlag, legacyEndpoint(rewindCommand), "and for rewind, which had -kinesis-endpoint already")
}

// The old -endpoint keeps its meaning per command, so existing scripts
// work, and says once which flag replaces it; given with its replacement
// at another value, it is a usage error.
func TestMistakeOldEndpointFlagStillWorksAndSaysItsNewName(t *testing.T) {
	t.Parallel()
	dynamo, kin := emulator.DynamoEndpoint(t), emulator.KinesisEndpoint(t)
	table, stream := emulator.UniqueName("cli-old-flag"), emulator.UniqueName("cli-old-flag")

	r := runCLI(t, env{}, "create-table", "-endpoint", dynamo, "-table", table)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "shardlease create-table: -endpoint is deprecated; use -dynamodb-endpoint (the DynamoDB endpoint, as -endpoint meant here)\n", r.stderr)
	r = runCLI(t, env{}, "create-stream", "-endpoint", kin, "-stream", stream)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stderr, "use -kinesis-endpoint (the Kinesis endpoint, as -endpoint meant here)")
	r = runCLI(t, env{}, "put", "-endpoint", kin, "-stream", stream, "-count", "2")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "wrote 2 record(s) to stream "+stream+"\n", r.stdout)

	r = runCLI(t, env{}, "list", "-endpoint", dynamo, "-dynamodb-endpoint", "http://127.0.0.1:1", "-table", table)
	assert.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, "-endpoint is the old name of -dynamodb-endpoint here; give only -dynamodb-endpoint")
	r = runCLI(t, env{}, "list", "-endpoint", dynamo, "-dynamodb-endpoint", dynamo, "-table", table)
	assert.Equal(t, 0, r.code, "the same endpoint twice is no conflict: %s", r.stderr)
}

// An endpoint nobody listens on fails at once, naming the endpoint, the
// flag or variable that set it, and what to do, for each service.
func TestMistakeUnreachableEndpointNamesItAndItsVariable(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := "http://" + l.Addr().String()
	require.NoError(t, l.Close()) // nothing listens there now
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"list", "-table", "orders-leases", "-dynamodb-endpoint", dead},
			[]string{"cannot reach the DynamoDB endpoint " + dead + " (set by -dynamodb-endpoint)", "shardlease emulators", "AWS_ENDPOINT_URL_DYNAMODB"}},
		{[]string{"put", "-stream", "orders", "-kinesis-endpoint", dead},
			[]string{"cannot reach the Kinesis endpoint " + dead + " (set by -kinesis-endpoint)", "AWS_ENDPOINT_URL_KINESIS"}},
		{[]string{"put", "-stream", "orders", "-endpoint", dead},
			[]string{"cannot reach the Kinesis endpoint " + dead + " (set by -kinesis-endpoint)"}},
	} {
		start := time.Now()
		r := runCLI(t, env{}, tc.args...)
		assert.Equal(t, 1, r.code, tc.args)
		for _, w := range tc.want {
			assert.Contains(t, r.stderr, w, tc.args)
		}
		assert.Less(t, time.Since(start), 15*time.Second, "%v: an unreachable endpoint fails within the SDK's retries", tc.args)
	}
}

// Without a flag, the hint names the variable the endpoint came from.
func TestMistakeUnreachableEndpointFromTheEnvironment(t *testing.T) {
	awsEnv(t)
	t.Setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
	r := runCLI(t, env{}, "list", "-table", "orders-leases")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "cannot reach the DynamoDB endpoint http://127.0.0.1:1 (set by AWS_ENDPOINT_URL)")
	assert.Contains(t, r.stderr, "AWS_ENDPOINT_URL alone sets both services")
}
