package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/internal/emulator"
)

// TestMain points the SDK's default configuration at dummy credentials and
// no config files for every test (see awsEnv), so that tests which change
// nothing of it can run in parallel.
func TestMain(m *testing.M) {
	noFiles := filepath.Join(os.TempDir(), "shardlease-cli-test-none")
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID": "AKIDTEST", "AWS_SECRET_ACCESS_KEY": "test-secret", "AWS_REGION": "us-east-1",
		"AWS_EC2_METADATA_DISABLED": "true", "AWS_CONFIG_FILE": filepath.Join(noFiles, "config"),
		"AWS_SHARED_CREDENTIALS_FILE": filepath.Join(noFiles, "credentials"),
	} {
		_ = os.Setenv(k, v)
	}
	for _, k := range clearedAWSVars {
		_ = os.Unsetenv(k)
	}
	emulator.Main(m)
}

// clearedAWSVars are the variables of the machine's AWS configuration that
// the tests run without.
var clearedAWSVars = []string{"AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION",
	"AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_DYNAMODB", "AWS_ENDPOINT_URL_KINESIS", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE"}

// awsEnv points the SDK's default configuration at dummy credentials and no
// config files, so that nothing real is read or fetched (no IMDS), for a
// test that changes some of it with t.Setenv afterwards; TestMain set the
// same for every test.
func awsEnv(t *testing.T) {
	t.Helper()
	dir := t.TempDir()
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDTEST")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test-secret")
	t.Setenv("AWS_REGION", "us-east-1")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "config"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "credentials"))
	for _, k := range clearedAWSVars {
		unsetenv(t, k)
	}
}

// unsetenv removes k for the rest of the test.
func unsetenv(t *testing.T, k string) {
	t.Helper()
	t.Setenv(k, "") // restores the old value when the test ends
	require.NoError(t, os.Unsetenv(k))
}

type result struct {
	code           int
	stdout, stderr string
}

// runCLI runs the command line in process.
func runCLI(t *testing.T, e env, args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), args, &stdout, &stderr, e)
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// fixture is a lease table on the emulator and a store over it for setting
// up rows the way consumers would.
type fixture struct {
	endpoint string
	table    string
	store    *shardlease.DynamoStore
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{endpoint: emulator.DynamoEndpoint(t), table: emulator.UniqueName("cli-leases")}
	r := runCLI(t, env{}, "create-table", "-dynamodb-endpoint", f.endpoint, "-table", f.table)
	require.Equal(t, 0, r.code, r.stderr)
	store, err := shardlease.NewDynamoStore(emulator.Dynamo(t), f.table)
	require.NoError(t, err)
	f.store = store
	return f
}

// run runs command with -endpoint and -table added.
func (f *fixture) run(t *testing.T, e env, command string, args ...string) result {
	t.Helper()
	return runCLI(t, e, append([]string{command, "-dynamodb-endpoint", f.endpoint, "-table", f.table}, args...)...)
}

// held creates the row for key and acquires it for owner.
func (f *fixture) held(t *testing.T, key shardlease.LeaseKey, owner string) shardlease.Lease {
	t.Helper()
	ctx := t.Context()
	_, err := f.store.Create(ctx, key, nil)
	require.NoError(t, err)
	l, err := f.store.Acquire(ctx, key, owner, 0)
	require.NoError(t, err)
	return l
}

func (f *fixture) get(t *testing.T, key shardlease.LeaseKey) shardlease.Lease {
	t.Helper()
	l, err := f.store.Get(t.Context(), key)
	require.NoError(t, err)
	return l
}

func shard(n int) string { return "shardId-00000000000" + string(rune('0'+n)) }

func TestCreateTable(t *testing.T) {
	t.Parallel()
	endpoint := emulator.DynamoEndpoint(t)
	table := emulator.UniqueName("cli-create")

	r := runCLI(t, env{}, "create-table", "-dynamodb-endpoint", endpoint, "-table", table)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "created lease table "+table+"\n", r.stdout)

	r = runCLI(t, env{}, "create-table", "-dynamodb-endpoint", endpoint, "-table", table)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "exists already")

	r = runCLI(t, env{}, "create-table", "-dynamodb-endpoint", endpoint, "-table", table, "-json")
	require.Equal(t, 0, r.code, r.stderr)
	assert.JSONEq(t, `{"table":"`+table+`","action":"exists"}`, r.stdout)

	store, err := shardlease.NewDynamoStore(emulator.Dynamo(t), table)
	require.NoError(t, err)
	require.NoError(t, store.CheckTable(t.Context()))
}

// TestEndpointFromEnvironment checks that without -endpoint the SDK's own
// AWS_ENDPOINT_URL_DYNAMODB is honoured.
func TestEndpointFromEnvironment(t *testing.T) {
	awsEnv(t)
	t.Setenv("AWS_ENDPOINT_URL_DYNAMODB", emulator.DynamoEndpoint(t))
	table := emulator.UniqueName("cli-env")
	r := runCLI(t, env{}, "create-table", "-table", table, "-json")
	require.Equal(t, 0, r.code, r.stderr)
	assert.JSONEq(t, `{"table":"`+table+`","action":"created"}`, r.stdout)
}

func TestList(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	stream := emulator.UniqueName("orders")
	key := func(n int) shardlease.LeaseKey { return shardlease.LeaseKey{Stream: stream, Shard: shard(n)} }
	expiry := time.Date(2030, 1, 2, 3, 4, 5, 678e6, time.UTC)

	// 0: held, checkpoint inside an aggregated record. Counter 2.
	l0 := f.held(t, key(0), "worker-a")
	_, err := f.store.Checkpoint(ctx, l0, "123", 4, expiry)
	require.NoError(t, err)
	// 1: finished and released. Counter 3.
	l1 := f.held(t, key(1), "worker-a")
	l1, err = f.store.Checkpoint(ctx, l1, shardlease.ShardEnd, -1, expiry)
	require.NoError(t, err)
	_, err = f.store.Release(ctx, l1)
	require.NoError(t, err)
	// 2: held, being handed off to worker-c. Counter 2.
	l2 := f.held(t, key(2), "worker-b")
	l2, err = f.store.Renew(ctx, l2, expiry)
	require.NoError(t, err)
	_, err = f.store.RequestHandoff(ctx, l2, "worker-c")
	require.NoError(t, err)
	// worker-b is the deputy of worker-a, which coordinates (it holds 0).
	_, err = f.store.Note(ctx, l2, "deputy "+shard(0)+" 1")
	require.NoError(t, err)
	// 3: child of 0 and 1, never taken. Counter 0.
	_, err = f.store.Create(ctx, key(3), []string{shard(1), shard(0)})
	require.NoError(t, err)
	// Another stream's lease is not listed.
	f.held(t, shardlease.LeaseKey{Stream: stream + "-other", Shard: shard(0)}, "worker-z")
	// worker-d holds nothing and keeps a worker row (counter 2); the other
	// stream's worker row is not shown.
	for range 2 {
		_, err = f.store.Heartbeat(ctx, stream, "worker-d")
		require.NoError(t, err)
	}
	_, err = f.store.Heartbeat(ctx, stream+"-other", "worker-y")
	require.NoError(t, err)

	t.Run("text", func(t *testing.T) {
		r := f.run(t, env{}, "list", "-stream", stream)
		require.Equal(t, 0, r.code, r.stderr)
		lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
		require.Len(t, lines, 8, r.stdout)
		assert.Equal(t, "coordinating: worker-a (holds "+shard(0)+", the first readable lease); deputy: worker-b", lines[5])
		assert.Equal(t, "finished, waiting for cleanup: "+shard(1)+" (child "+shard(3)+" not started)", lines[6])
		assert.Equal(t, "workers holding no lease: worker-d (counter 2)", lines[7])
		lines = lines[:5]
		assert.Equal(t, []string{"SHARD", "OWNER", "COUNTER", "CHECKPOINT", "PARENTS", "HANDOFF", "EXPIRY", "(HOLDER'S", "CLOCK)"}, strings.Fields(lines[0]))
		// An acquire's counter comes from the stream's fence floor: read it.
		counter := func(n int) string { return strconv.FormatInt(f.get(t, key(n)).Counter, 10) }
		want := [][]string{
			{shard(0), "worker-a", counter(0), "123/4", "-", "-", "2030-01-02T03:04:05.678Z"},
			{shard(1), "free", counter(1), "SHARD_END", "-", "-", "-"},
			{shard(2), "worker-b", counter(2), "-", "-", "worker-c", "2030-01-02T03:04:05.678Z"},
			{shard(3), "free", "0", "-", shard(0) + "," + shard(1), "-", "-"},
		}
		for i, w := range want {
			assert.Equal(t, w, strings.Fields(lines[i+1]), "row %d", i)
		}
		// Aligned: every column starts at the same offset on every line.
		col := strings.Index(lines[0], "OWNER")
		for _, line := range lines[1:] {
			assert.NotEqual(t, byte(' '), line[col], "line %q", line)
			assert.Equal(t, byte(' '), line[col-1], "line %q", line)
		}
	})

	t.Run("json", func(t *testing.T) {
		r := f.run(t, env{}, "list", "-stream", stream, "-json")
		require.Equal(t, 0, r.code, r.stderr)
		s, k := stream, func(n int) string { return stream + ":" + shard(n) }
		assert.JSONEq(t, `[
			{"stream":"`+s+`","shard":"`+shard(0)+`","lease_key":"`+k(0)+`","owner":"worker-a","held":true,"counter":`+jsonInt(f.get(t, key(0)).Counter)+`,
			 "checkpoint":"123","sub_sequence":4,"parents":[],"handoff_to":"","note":"","holder_expiry":"2030-01-02T03:04:05.678Z","start":"","waiting_for_cleanup":false},
			{"stream":"`+s+`","shard":"`+shard(1)+`","lease_key":"`+k(1)+`","owner":"","held":false,"counter":`+jsonInt(f.get(t, key(1)).Counter)+`,
			 "checkpoint":"SHARD_END","sub_sequence":null,"parents":[],"handoff_to":"","note":"","holder_expiry":null,"start":"","waiting_for_cleanup":true},
			{"stream":"`+s+`","shard":"`+shard(2)+`","lease_key":"`+k(2)+`","owner":"worker-b","held":true,"counter":`+jsonInt(f.get(t, key(2)).Counter)+`,
			 "checkpoint":"","sub_sequence":null,"parents":[],"handoff_to":"worker-c","note":"deputy `+shard(0)+` 1","holder_expiry":"2030-01-02T03:04:05.678Z","start":"","waiting_for_cleanup":false},
			{"stream":"`+s+`","shard":"`+shard(3)+`","lease_key":"`+k(3)+`","owner":"","held":false,"counter":0,
			 "checkpoint":"","sub_sequence":null,"parents":["`+shard(0)+`","`+shard(1)+`"],"handoff_to":"","note":"","holder_expiry":null,"start":"","waiting_for_cleanup":false}
		]`, r.stdout)
	})

	t.Run("a stream the table does not hold", func(t *testing.T) {
		r := f.run(t, env{}, "list", "-stream", "no-such-stream")
		require.Equal(t, 1, r.code, r.stderr)
		assert.Contains(t, r.stderr, "table "+f.table+", stream no-such-stream: no lease of the stream in the table")
		assert.Empty(t, r.stdout)
	})
}

func TestReset(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	stream := emulator.UniqueName("orders")
	e := env{hostname: func() (string, error) { return "ops-box", nil }}

	t.Run("refused on a held lease", func(t *testing.T) {
		key := shardlease.LeaseKey{Stream: stream, Shard: shard(0)}
		held := f.held(t, key, "worker-a")
		held, err := f.store.Checkpoint(ctx, held, "100", -1, time.Now())
		require.NoError(t, err)

		r := f.run(t, e, "reset", "-stream", stream, "-shard", shard(0), "-to", "5")
		assert.Equal(t, 1, r.code)
		assert.Contains(t, r.stderr, `held by worker-a`)
		assert.Contains(t, r.stderr, "stop that worker")
		assert.Contains(t, r.stderr, "-force")
		assert.Equal(t, held, f.get(t, key), "the lease must be unchanged")
	})

	t.Run("force fences the holder out", func(t *testing.T) {
		key := shardlease.LeaseKey{Stream: stream, Shard: shard(1)}
		held := f.held(t, key, "worker-a")
		held, err := f.store.Checkpoint(ctx, held, "100", 2, time.Now())
		require.NoError(t, err)

		r := f.run(t, e, "reset", "-stream", stream, "-shard", shard(1), "-to", "42", "-force", "-json")
		require.Equal(t, 0, r.code, r.stderr)
		now := f.get(t, key)
		assert.JSONEq(t, `{"table":"`+f.table+`","stream":"`+stream+`","shard":"`+shard(1)+`","action":"reset",
			"previous_owner":"worker-a","previous_checkpoint":"100","checkpoint":"42","counter":`+jsonInt(now.Counter)+`,"forced":true,
			"owner":"`+now.Owner+`","resume_after_ms":0}`, r.stdout)
		assert.Equal(t, "shardlease-cli@ops-box", shardlease.OwnerName(now.Owner), "left held by the command until the holder has stopped")
		assert.Equal(t, "42", now.Checkpoint)
		assert.Equal(t, int64(-1), now.SubSequence)

		_, err = f.store.Renew(ctx, held, time.Now())
		assert.ErrorIs(t, err, shardlease.ErrLeaseLost)
		_, err = f.store.Checkpoint(ctx, held, "200", -1, time.Now())
		assert.ErrorIs(t, err, shardlease.ErrLeaseLost)
		assert.Equal(t, "42", f.get(t, key).Checkpoint, "the fenced holder's checkpoint must not land")
	})

	t.Run("free lease to SHARD_END", func(t *testing.T) {
		key := shardlease.LeaseKey{Stream: stream, Shard: shard(2)}
		_, err := f.store.Create(ctx, key, nil)
		require.NoError(t, err)

		r := f.run(t, e, "reset", "-stream", stream, "-shard", shard(2), "-to", "SHARD_END")
		require.Equal(t, 0, r.code, r.stderr)
		assert.Contains(t, r.stdout, "checkpoint moved from - to SHARD_END")
		now := f.get(t, key)
		assert.Equal(t, shardlease.ShardEnd, now.Checkpoint)
		assert.False(t, now.Held())
		assert.Equal(t, int64(3), now.Counter, "acquire, checkpoint, release")
	})

	t.Run("missing shard", func(t *testing.T) {
		r := f.run(t, e, "reset", "-stream", stream, "-shard", shard(9), "-to", "1")
		assert.Equal(t, 1, r.code)
		assert.Contains(t, r.stderr, "lease not found")
		assert.Contains(t, r.stderr, "shardlease list -table "+f.table+" -stream "+stream)
	})

	t.Run("positions that are not checkpoints", func(t *testing.T) {
		for _, pos := range []string{"TRIM_HORIZON", "LATEST", "12x", "-1"} {
			r := f.run(t, e, "reset", "-stream", stream, "-shard", shard(2), "-to", pos)
			assert.Equal(t, 2, r.code, pos)
			assert.Contains(t, r.stderr, "-to", pos)
			assert.Contains(t, r.stderr, "SHARD_END", pos)
		}
		assert.Equal(t, shardlease.ShardEnd, f.get(t, shardlease.LeaseKey{Stream: stream, Shard: shard(2)}).Checkpoint)
	})
}

func jsonInt(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func TestRelease(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	stream := emulator.UniqueName("orders")
	key := func(n int) shardlease.LeaseKey { return shardlease.LeaseKey{Stream: stream, Shard: shard(n)} }

	t.Run("dead holder", func(t *testing.T) {
		held := f.held(t, key(0), "worker-dead")
		held, err := f.store.Checkpoint(ctx, held, "77", -1, time.Now())
		require.NoError(t, err)

		r := f.run(t, env{}, "release", "-stream", stream, "-shard", shard(0), "-wait", "200ms", "-json")
		require.Equal(t, 0, r.code, r.stderr)
		var res releaseResult
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &res))
		assert.Equal(t, "released", res.Action)
		assert.Equal(t, "worker-dead", res.PreviousOwner)
		assert.Equal(t, held.Counter, res.ObservedCounter)
		assert.Equal(t, "77", res.Checkpoint)
		assert.False(t, res.Forced)
		assert.GreaterOrEqual(t, res.WaitedMillis, int64(200))

		now := f.get(t, key(0))
		assert.False(t, now.Held())
		assert.Equal(t, "77", now.Checkpoint)
		assert.Equal(t, res.Counter, now.Counter)
		_, err = f.store.Renew(ctx, held, time.Now())
		assert.ErrorIs(t, err, shardlease.ErrLeaseLost)
	})

	t.Run("refused while the holder renews", func(t *testing.T) {
		held := f.held(t, key(1), "worker-live")
		watching := make(chan shardlease.Lease, 1)
		finished := make(chan struct{})
		renewed := make(chan error, 1)
		go func() {
			select {
			case l := <-watching:
				_, err := f.store.Renew(ctx, l, time.Now())
				renewed <- err
			case <-finished:
				renewed <- nil
			}
		}()
		e := env{poll: 10 * time.Millisecond, watching: func(l shardlease.Lease) { watching <- l }}
		r := f.run(t, e, "release", "-stream", stream, "-shard", shard(1), "-wait", "10m")
		close(finished)
		require.NoError(t, <-renewed)
		assert.Equal(t, 1, r.code, r.stdout)
		assert.Contains(t, r.stderr, fmt.Sprintf("counter moved from %d to %d", held.Counter, held.Counter+1))
		assert.Contains(t, r.stderr, "holder is alive")
		assert.Contains(t, r.stderr, "-force")

		now := f.get(t, key(1))
		assert.Equal(t, "worker-live", now.Owner)
		assert.Equal(t, held.Counter+1, now.Counter, "only the holder's renewal")
	})

	t.Run("force", func(t *testing.T) {
		held := f.held(t, key(3), "worker-live")
		held, err := f.store.Checkpoint(shardlease.WithHolderLeaseDuration(ctx, 7*time.Second), held, "88", -1, time.Now())
		require.NoError(t, err)
		r := f.run(t, env{}, "release", "-stream", stream, "-shard", shard(3), "-force")
		require.Equal(t, 0, r.code, r.stderr)
		assert.Contains(t, r.stdout, "taken from worker-live (forced), which can no longer write to it")
		assert.Contains(t, r.stdout, "stood still for the holder's lease duration (7s)")
		now := f.get(t, key(3))
		assert.True(t, strings.HasPrefix(now.Owner, "shardlease-cli@"), "left held by the command until the holder has stopped: %q", now.Owner)
		assert.Equal(t, 7*time.Second, now.Duration, "with the holder's lease duration")
		assert.Equal(t, "88", now.Checkpoint, "the checkpoint is kept")
		_, err = f.store.Renew(ctx, held, time.Now())
		assert.ErrorIs(t, err, shardlease.ErrLeaseLost)
	})

	t.Run("force on a dead holder", func(t *testing.T) {
		f.held(t, key(2), "worker-dead")
		r := f.run(t, env{}, "release", "-stream", stream, "-shard", shard(2), "-force", "-json")
		require.Equal(t, 0, r.code, r.stderr)
		var res releaseResult
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &res))
		assert.Equal(t, "taken", res.Action, "a holder not watched may be alive")
		assert.Equal(t, "worker-dead", res.PreviousOwner)
		assert.Equal(t, f.get(t, key(2)).Owner, res.Owner)
		// Free it for the cases below, as the command would have.
		_, err := f.store.Release(ctx, f.get(t, key(2)))
		require.NoError(t, err)
	})

	t.Run("already free", func(t *testing.T) {
		r := f.run(t, env{}, "release", "-stream", stream, "-shard", shard(2), "-wait", "1ms", "-json")
		require.Equal(t, 0, r.code, r.stderr)
		assert.Contains(t, r.stdout, `"action": "already_free"`)
	})

	t.Run("already free says so, without watching", func(t *testing.T) {
		watched := false
		r := f.run(t, env{watching: func(shardlease.Lease) { watched = true }}, "release", "-stream", stream, "-shard", shard(2))
		require.Equal(t, 0, r.code, r.stderr)
		assert.Equal(t, fmt.Sprintf("%s:%s is free already (counter %d); nothing changed\n", stream, shard(2), f.get(t, key(2)).Counter), r.stdout)
		assert.NotContains(t, r.stderr, "watching")
		assert.False(t, watched)
	})

	t.Run("wait with force is a usage error", func(t *testing.T) {
		held := f.held(t, key(4), "worker-live")
		r := f.run(t, env{}, "release", "-stream", stream, "-shard", shard(4), "-force", "-wait", "30s")
		assert.Equal(t, 2, r.code)
		assert.Contains(t, r.stderr, "shardlease release: -wait and -force exclude each other")
		assert.Equal(t, held, f.get(t, key(4)), "nothing changed")
	})

	t.Run("json errors", func(t *testing.T) {
		r := f.run(t, env{}, "release", "-stream", stream, "-shard", shard(4), "-force", "-wait", "30s", "-json")
		assert.Equal(t, 2, r.code)
		var e jsonError
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &e), r.stdout)
		assert.Equal(t, jsonError{Command: "release", Error: "-wait and -force exclude each other: -force releases at once without watching; drop one of them", Usage: true, ExitCode: 2}, e)

		r = f.run(t, env{}, "release", "-stream", stream, "-shard", "shardId-000000000099", "-force", "-json")
		assert.Equal(t, 1, r.code)
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &e), r.stdout)
		assert.Equal(t, "release", e.Command)
		assert.False(t, e.Usage)
		assert.Equal(t, 1, e.ExitCode)
		assert.Contains(t, e.Error, "lease not found")
		assert.NotContains(t, e.Error, "shardlease: ")

		// A flag error before -json is parsed is JSON too.
		r = f.run(t, env{}, "release", "-bogus", "-json")
		assert.Equal(t, 2, r.code)
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &e), r.stdout)
		assert.Contains(t, e.Error, "flag provided but not defined: -bogus")
	})

	t.Run("wait must be positive", func(t *testing.T) {
		r := f.run(t, env{}, "release", "-stream", stream, "-shard", shard(2), "-wait", "0s")
		assert.Equal(t, 2, r.code)
		assert.Contains(t, r.stderr, "-wait 0s: must be positive")
	})
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"no args", nil, 2, []string{"Commands:", "create-table", "list", "reset", "release"}},
		{"unknown command", []string{"lsit"}, 2, []string{`unknown command "lsit"; did you mean "list"?`}},
		{"missing table", []string{"list", "-stream", "s"}, 2, []string{"shardlease list: missing -table", "shardlease list -h"}},
		{"missing stream", []string{"export", "-table", "tbl"}, 2, []string{"missing -stream"}},
		{"missing shard", []string{"release", "-table", "tbl", "-stream", "s"}, 2, []string{"missing -shard"}},
		{"missing to", []string{"reset", "-table", "tbl", "-stream", "s", "-shard", "x"}, 2, []string{"missing -to"}},
		{"unknown flag", []string{"list", "-tabel", "tbl"}, 2, []string{"flag provided but not defined: -tabel"}},
		{"bad duration", []string{"release", "-wait", "soon"}, 2, []string{`invalid value "soon" for flag -wait`}},
		{"positional", []string{"list", "-table", "tbl", "-stream", "s", "extra"}, 2, []string{`unexpected argument "extra"`}},
		{"bad stream", []string{"list", "-table", "tbl", "-stream", "a:b"}, 2, []string{"shardlease list: -stream: invalid name: stream"}},
		{"bad table", []string{"create-table", "-table", "t"}, 2, []string{"-table", "shorter than 3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runCLI(t, env{}, tc.args...)
			assert.Equal(t, tc.code, r.code)
			for _, w := range tc.want {
				assert.Contains(t, r.stderr, w)
			}
			assert.LessOrEqual(t, strings.Count(r.stderr, "shardlease: "), 1, r.stderr)
			assert.Empty(t, r.stdout)
		})
	}
}

func TestNoRegion(t *testing.T) {
	awsEnv(t)
	unsetenv(t, "AWS_REGION")
	r := runCLI(t, env{}, "list", "-table", "tbl", "-stream", "s")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "pass -region or set AWS_REGION")
}

func TestMissingTable(t *testing.T) {
	t.Parallel()
	endpoint := emulator.DynamoEndpoint(t)
	table := emulator.UniqueName("cli-missing")
	for _, args := range [][]string{
		{"list", "-stream", "s"},
		{"reset", "-stream", "s", "-shard", "x", "-to", "1"},
		{"release", "-stream", "s", "-shard", "x", "-force"},
	} {
		r := runCLI(t, env{}, append(args, "-dynamodb-endpoint", endpoint, "-table", table)...)
		assert.Equal(t, 1, r.code, args)
		assert.Contains(t, r.stderr, "shardlease create-table -table "+table, args)
		// The command's prefix replaces the library's: no "shardlease: " inside.
		assert.True(t, strings.HasPrefix(r.stderr, "shardlease "+args[0]+": table "+table+": lease table not found: "), r.stderr)
		assert.NotContains(t, r.stderr, "shardlease: ", args)
	}
}

func TestHelp(t *testing.T) {
	t.Parallel()
	r := runCLI(t, env{}, "help")
	assert.Equal(t, 0, r.code)
	assert.Contains(t, r.stdout, "Commands:")

	for _, c := range commands {
		for _, args := range [][]string{{c.name, "-h"}, {c.name, "-help"}, {"help", c.name}} {
			r := runCLI(t, env{}, args...)
			assert.Equal(t, 0, r.code, args)
			assert.Empty(t, r.stderr, args)
			assert.Contains(t, r.stdout, "Usage: shardlease "+c.name, args)
			assert.Contains(t, r.stdout, "Example:\n\n\tshardlease "+c.name, args)
			if c.calls != noService {
				assert.Contains(t, r.stdout, "-region region", args)
			}
			// One flag name per endpoint, in the synopsis and the flags.
			for _, ef := range []struct {
				name  string
				calls bool
			}{{"dynamodb-endpoint", c.calls.dynamo()}, {"kinesis-endpoint", c.calls.kinesis()}} {
				if ef.calls {
					assert.Contains(t, r.stdout, "[-"+ef.name+" URL]", args)
					assert.Contains(t, r.stdout, "-"+ef.name+" URL\n", args)
				} else {
					assert.NotContains(t, r.stdout, "-"+ef.name, args)
				}
			}
			if strings.Contains(c.usage, "-table TABLE") {
				assert.Contains(t, r.stdout, "-table table", args)
			}
		}
	}
}

// TestOwnerID checks the owner id the command writes under.
func TestOwnerID(t *testing.T) {
	t.Parallel()
	e := env{hostname: func() (string, error) { return "ops-box", nil }}
	id := e.ownerID()
	assert.Equal(t, "shardlease-cli@ops-box", shardlease.OwnerName(id))
	assert.NotEqual(t, id, e.ownerID(), "each command writes under an identity of its own")
	host, err := os.Hostname()
	if err == nil && host != "" {
		assert.Equal(t, "shardlease-cli@"+host, shardlease.OwnerName(env{}.ownerID()))
	}
}
