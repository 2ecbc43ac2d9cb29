package backoff

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestNextGrowsWithinBounds(t *testing.T) {
	b := Backoff{Min: 100 * time.Millisecond, Max: 2 * time.Second}
	ceil := 100 * time.Millisecond
	for i := range 20 {
		d := b.Next()
		assert.LessOrEqual(t, d, ceil, "attempt %d", i)
		assert.GreaterOrEqual(t, d, ceil/2, "attempt %d keeps at least half", i)
		ceil = min(2*ceil, 2*time.Second)
	}
	assert.Equal(t, 20, b.Attempts())
	b.Reset()
	assert.LessOrEqual(t, b.Next(), 100*time.Millisecond)
}

func TestWaitHonoursContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		start := time.Now()
		assert.True(t, Wait(ctx, time.Second))
		assert.Equal(t, time.Second, time.Since(start))
		cancel()
		assert.False(t, Wait(ctx, time.Hour))
		assert.Equal(t, time.Second, time.Since(start), "a cancelled wait returns at once")
	})
}
