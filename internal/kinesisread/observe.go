package kinesisread

import "context"

// An Observer is told of the calls a listing makes: with a nil err as a
// call begins, with its error when it fails, and with an empty call once
// the listing is complete. The consumer's start-up uses it to say which
// call it waits on and why (see WithObserver).
type Observer func(call string, err error)

type observerKey struct{}

// WithObserver returns ctx carrying fn, which the listings made with it
// (ListShards, ListShardsFiltered) tell of their calls.
func WithObserver(ctx context.Context, fn Observer) context.Context {
	return context.WithValue(ctx, observerKey{}, fn)
}

// observe tells ctx's Observer, if any, of a call or its failure.
func observe(ctx context.Context, call string, err error) {
	if fn, ok := ctx.Value(observerKey{}).(Observer); ok && fn != nil {
		fn(call, err)
	}
}
