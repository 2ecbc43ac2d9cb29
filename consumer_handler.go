package shardlease

import (
	"fmt"
	"runtime"
	"strings"
)

// panicStack returns the stack of a panic being recovered, called from the
// deferred function that recovers it: one "function (file:line)" entry per
// frame, from the panic site outward to the library's call of the handler,
// without the runtime's panic machinery. The first entry is the panic site.
func panicStack() []string {
	pcs := make([]uintptr, 64)
	n := runtime.Callers(2, pcs)
	frames := runtime.CallersFrames(pcs[:n])
	var out []string
	seenPanic := false
	for {
		f, more := frames.Next()
		switch {
		case !seenPanic:
			// The deferred function and the runtime up to gopanic.
			seenPanic = f.Function == "runtime.gopanic"
		case len(out) == 0 && strings.HasPrefix(f.Function, "runtime."):
			// panicmem, sigpanic, panicIndex...: how the runtime panicked.
		case strings.HasPrefix(f.Function, "github.com/shardlease/shardlease.(*leaseRunner)."):
			// The library's own frames below the handler.
			return out
		default:
			out = append(out, fmt.Sprintf("%s (%s:%d)", f.Function, f.File, f.Line))
		}
		if !more {
			return out
		}
	}
}

// logPanic logs a handler panic as one Error line, with the panic value,
// the panic site and the stack as a list of frames, once per panic site and
// batch: the retries of a batch that panics at the same place again are
// logged at Debug only (Stats().HandlerPanics counts every one). Only the
// runner's handler goroutine calls it.
func (r *leaseRunner) logPanic(b *Batch, value any, stack []string) {
	site := "unknown"
	if len(stack) > 0 {
		site = stack[0]
	}
	first, last := "", ""
	if len(b.Records) > 0 {
		first, last = b.Records[0].SequenceNumber, b.Records[len(b.Records)-1].SequenceNumber
	}
	seen := fmt.Sprintf("%s|%s|%s|%d", site, first, last, len(b.Records))
	if seen == r.panicSeen {
		r.log.Debug("handler panicked again at the same place on the same batch", "panic", fmt.Sprint(value), "site", site)
		return
	}
	r.panicSeen = seen
	r.log.Error("handler panicked; the batch is retried", "panic", fmt.Sprint(value), "site", site,
		"records", len(b.Records), "first", first, "stack", stack)
}
