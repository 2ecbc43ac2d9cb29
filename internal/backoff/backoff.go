// Package backoff computes retry delays: exponential growth with jitter,
// capped.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff yields growing, jittered delays between Min and Max. The zero value
// is not usable; set Min and Max. It is not safe for concurrent use.
type Backoff struct {
	Min, Max time.Duration
	n        int
}

// Next returns the next delay: Min·2^n capped at Max, less up to half of it
// at random, so that many workers backing off together spread out.
func (b *Backoff) Next() time.Duration {
	d := b.Min
	for i := 0; i < b.n && d < b.Max; i++ {
		d *= 2
	}
	d = min(d, b.Max)
	if b.n < 62 {
		b.n++
	}
	if half := int64(d / 2); half > 0 {
		d -= time.Duration(rand.Int64N(half + 1))
	}
	return d
}

// Reset starts the sequence again from Min.
func (b *Backoff) Reset() { b.n = 0 }

// Attempts returns how many delays Next has handed out since the last Reset.
func (b *Backoff) Attempts() int { return b.n }

// Sleep waits for the next delay or until ctx is done, and reports whether
// the full delay passed.
func (b *Backoff) Sleep(ctx context.Context) bool {
	return Wait(ctx, b.Next())
}

// Wait waits for d or until ctx is done, and reports whether d passed.
func Wait(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
