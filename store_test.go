package shardlease_test

import (
	"testing"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/internal/storetest"
)

func TestConformance(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) shardlease.LeaseStore { return shardlease.NewMemoryStore() })
	})
}
