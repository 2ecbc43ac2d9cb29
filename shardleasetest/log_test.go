package shardleasetest_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/shardleasetest"
)

// logChild names, in the environment of a copy of this test binary, the
// logChild tests it should run; they skip themselves in a normal run.
const logChild = "SHARDLEASETEST_LOG_CHILD"

// runLogChild runs this test binary again with the logChild tests and
// returns what it wrote to standard output and to standard error.
func runLogChild(t *testing.T, args ...string) (stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^TestLogChild", "-test.count=1"}, args...)...)
	cmd.Env = append(os.Environ(), logChild+"=1")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	require.NoError(t, cmd.Run(), "the child run failed:\n%s\n%s", out.String(), errOut.String())
	return out.String(), errOut.String()
}

// A consumer given Logger(t) logs into the test's own output: under the
// test's name with -v, and not at all when the test passes without -v.
// Nothing reaches standard error while the test runs; a line logged after
// the test completed goes there, naming the test, and panics nowhere.
func TestLoggerSendsTheConsumersLogToTheTest(t *testing.T) {
	t.Parallel()
	if os.Getenv(logChild) != "" {
		t.Skip("runs in the parent")
	}
	stdout, stderr := runLogChild(t, "-test.v")
	run := strings.Index(stdout, "=== RUN   TestLogChildConsumer\n")
	require.GreaterOrEqual(t, run, 0, stdout)
	taken := regexp.MustCompile(`(?m)^    time=\d\d:\d\d:\d\d\.\d{3} level=INFO msg="lease taken" stream=orders owner=worker-1#\w+ shard=shardId-000000000000 `)
	loc := taken.FindStringIndex(stdout)
	require.NotNil(t, loc, "the consumer's Info line, indented as the test's output:\n%s", stdout)
	assert.Greater(t, loc[0], run, "under the test's name")
	assert.Contains(t, stdout, `msg=stopped stream=orders owner=worker-1#`, "the lines of Run's stop at cleanup are the test's too")
	assert.NotContains(t, stdout, "level=DEBUG", "Logger logs Info and above")
	assert.Equal(t, "shardleasetest: logged after TestLogChildConsumer completed: level=INFO msg=\"after the test\" n=1\n",
		regexp.MustCompile(`time=\S+ `).ReplaceAllString(stderr, ""), "only the line logged after the test, on standard error")

	stdout, stderr = runLogChild(t)
	assert.NotContains(t, stdout, "lease taken", "a passing test's log is not shown without -v")
	assert.NotContains(t, stderr, "lease taken")
}

// late is the logger TestLogChildConsumer leaves for TestLogChildLate.
var late struct {
	mu  sync.Mutex
	log *slog.Logger
}

// TestLogChildConsumer runs a consumer whose logger is Logger(t), in fake
// time, when run by TestLoggerSendsTheConsumersLogToTheTest.
func TestLogChildConsumer(t *testing.T) {
	if os.Getenv(logChild) == "" {
		t.Skip("run by TestLoggerSendsTheConsumersLogToTheTest")
	}
	log := shardleasetest.Logger(t)
	late.mu.Lock()
	late.log = log
	late.mu.Unlock()
	synctest.Test(t, func(t *testing.T) {
		k := shardleasetest.NewKinesis()
		require.NoError(t, k.AddStream("orders", 1))
		_, _, err := k.Put("orders", "order-1", []byte("10"))
		require.NoError(t, err)
		got := shardleasetest.Collect(nil)
		c, err := shardlease.NewConsumer(k, shardlease.NewMemoryStore(), "orders", got.Handle,
			shardlease.WithOwnerID("worker-1"), shardlease.WithLogger(log))
		require.NoError(t, err)
		shardleasetest.Run(t, c)
		got.WaitFor(t, 1, time.Minute)
	})
}

// TestLogChildLate logs through the logger of a test that has completed.
func TestLogChildLate(t *testing.T) {
	if os.Getenv(logChild) == "" {
		t.Skip("run by TestLoggerSendsTheConsumersLogToTheTest")
	}
	late.mu.Lock()
	defer late.mu.Unlock()
	require.NotNil(t, late.log, "TestLogChildConsumer ran first")
	late.log.Info("after the test", "n", 1)
}

// outputT is a testing.TB whose output is a buffer and whose cleanups run
// when the test says.
type outputT struct {
	testing.TB
	out      bytes.Buffer
	cleanups []func()
}

func (o *outputT) Output() io.Writer { return &o.out }
func (o *outputT) Cleanup(fn func()) { o.cleanups = append(o.cleanups, fn) }

func (o *outputT) cleanup() {
	for _, fn := range slices.Backward(o.cleanups) {
		fn()
	}
}

// LogHandler writes each record at its level and above as one text line,
// the time as a clock reading, attributes and groups included.
func TestLogHandlerLevelsAndFormat(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		info, debug := &outputT{TB: t}, &outputT{TB: t}
		shardleasetest.Logger(info).Debug("take round", "stream", "orders")
		slog.New(shardleasetest.LogHandler(debug, slog.LevelDebug)).Debug("take round", "stream", "orders")
		shardleasetest.Logger(info).With("stream", "orders").WithGroup("lease").Info("taken", "shard", "shardId-000000000000")
		assert.Equal(t, "time=00:00:00.000 level=INFO msg=taken stream=orders lease.shard=shardId-000000000000\n", info.out.String(), "Debug is left out")
		assert.Equal(t, "time=00:00:00.000 level=DEBUG msg=\"take round\" stream=orders\n", debug.out.String())
		assert.True(t, shardleasetest.Logger(info).Enabled(context.Background(), slog.LevelWarn))
		info.cleanup()
		debug.cleanup()
	})
}
