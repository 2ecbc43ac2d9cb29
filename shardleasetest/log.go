package shardleasetest

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
)

// A consumer logs to slog.Default() unless it is given a logger, and
// slog.Default() writes to the process's standard error: in a test that is
// a stream of lines that belong to no test, printed whether the test passes
// or fails. Logger puts them in the test's own log instead, where go test
// shows them under the test's name with -v or when the test fails.
//
// The test's log can be written only until the test has completed. A
// consumer that a test left running (a goroutine the test did not wait for)
// may log later than that, so the writer checks, under its lock, whether
// the test is over, and writes those late lines to standard error, naming
// the test, instead of panicking in a goroutine of the library's.

// Logger returns a logger that writes records at Info and above to t's
// log, for [shardlease.WithLogger]:
//
//	c, err := shardlease.NewConsumer(kin, store, "orders", handle,
//		shardlease.WithLogger(shardleasetest.Logger(t)))
//
// Each record is one line in slog's text format, its time on the clock of
// the test (the fake clock inside a testing/synctest bubble). Call it from
// the test before starting the consumer; [LogHandler] gives another level.
func Logger(t testing.TB) *slog.Logger {
	return slog.New(LogHandler(t, slog.LevelInfo))
}

// LogHandler returns a [slog.Handler] that writes records at level and
// above to t's log, as [Logger] does: slog.New(LogHandler(t,
// slog.LevelDebug)) shows a consumer's take rounds and checkpoints too.
// Records logged after the test has completed go to standard error,
// prefixed with the test's name.
func LogHandler(t testing.TB, level slog.Leveler) slog.Handler {
	w := &testLogWriter{out: t.Output(), name: t.Name()}
	t.Cleanup(w.close)
	return slog.NewTextHandler(w, &slog.HandlerOptions{Level: level, ReplaceAttr: shortTime})
}

// shortTime prints a record's time as a clock reading: a test's log lines
// are read beside each other, within one run.
func shortTime(groups []string, a slog.Attr) slog.Attr {
	if a.Key == slog.TimeKey && len(groups) == 0 && a.Value.Kind() == slog.KindTime {
		return slog.String(slog.TimeKey, a.Value.Time().Format("15:04:05.000"))
	}
	return a
}

// testLogWriter writes a handler's lines to a test's output while the test
// runs, and to standard error after it completed. mu orders every write
// before or after close, so no write reaches out once the test has ended.
type testLogWriter struct {
	out  io.Writer // t.Output()
	name string    // t.Name()

	mu     sync.Mutex
	closed bool // set by the test's cleanup
}

// Write writes one record's line (slog handlers write a record at once).
func (w *testLogWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		_, err := fmt.Fprintf(os.Stderr, "shardleasetest: logged after %s completed: %s", w.name, p)
		return len(p), err
	}
	return w.out.Write(p)
}

// close is the test's cleanup: it runs after the cleanups registered later
// (those of [Run] among them), so a consumer's last lines as it stops are
// still the test's.
func (w *testLogWriter) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
}
