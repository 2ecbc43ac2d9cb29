package shardlease

import (
	"bytes"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
)

// A runner's logger writes what Logger.With would have given it, whatever
// is logged through it and whatever is added to it after.
func TestRunnerLogAsLoggerWith(t *testing.T) {
	key := LeaseKey{Stream: "orders", Shard: "shardId-000000000001"}
	for _, grouped := range []bool{false, true} {
		var want, got bytes.Buffer
		base := func(b *bytes.Buffer) *slog.Logger {
			noTime := func(_ []string, a slog.Attr) slog.Attr {
				if a.Key == slog.TimeKey {
					return slog.Attr{}
				}
				return a
			}
			return slog.New(slog.NewJSONHandler(b, &slog.HandlerOptions{Level: slog.LevelInfo, ReplaceAttr: noTime}))
		}
		with := base(&want).With("shard", key.Shard)
		if grouped {
			with = base(&want).With("stream", key.Stream, "shard", key.Shard)
		}
		lazy := newRunnerLog(base(&got), key, grouped)
		for _, l := range []*slog.Logger{with, lazy} {
			l.Debug("not taken")
			l.Info("lease taken", "counter", 3)
			l.With("a", 1).WithGroup("g").Warn("lost", "b", 2)
		}
		assert.Equal(t, want.String(), got.String(), "grouped %v", grouped)
		assert.Contains(t, got.String(), `"shard":"shardId-000000000001"`)
	}
}
