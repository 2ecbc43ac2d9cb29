package shardlease

import (
	"context"
	"log/slog"
	"sync"
)

// runnerLog is the handler of a lease runner's logger: the consumer's
// handler with the runner's shard attribute (and in a Group its stream's),
// as Logger.With would give, but added only when the runner first logs. A
// handler's WithAttrs formats the attributes ahead and copies its state, a
// few hundred bytes a runner, and the runner of an idle shard seldom logs.
type runnerLog struct {
	base          slog.Handler
	stream, shard string // stream is "" outside a Group

	once sync.Once
	with slog.Handler // base with the attributes, made by the first use
}

// newRunnerLog returns the logger of the runner of key: with its stream
// too when grouped.
func newRunnerLog(base *slog.Logger, key LeaseKey, grouped bool) *slog.Logger {
	l := &runnerLog{base: base.Handler(), shard: key.Shard}
	if grouped {
		l.stream = key.Stream
	}
	return slog.New(l)
}

// handler returns the base handler with the runner's attributes.
func (l *runnerLog) handler() slog.Handler {
	l.once.Do(func() {
		attrs := []slog.Attr{slog.String("shard", l.shard)}
		if l.stream != "" {
			attrs = []slog.Attr{slog.String("stream", l.stream), attrs[0]}
		}
		l.with = l.base.WithAttrs(attrs)
	})
	return l.with
}

// Enabled asks the base handler: attributes do not change what it takes.
func (l *runnerLog) Enabled(ctx context.Context, level slog.Level) bool {
	return l.base.Enabled(ctx, level)
}

// Handle handles r with the runner's attributes.
func (l *runnerLog) Handle(ctx context.Context, r slog.Record) error {
	return l.handler().Handle(ctx, r)
}

// WithAttrs returns the handler with the runner's attributes, then attrs.
func (l *runnerLog) WithAttrs(attrs []slog.Attr) slog.Handler {
	return l.handler().WithAttrs(attrs)
}

// WithGroup returns the handler with the runner's attributes, then group
// name.
func (l *runnerLog) WithGroup(name string) slog.Handler { return l.handler().WithGroup(name) }
