package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/internal/emulator"
)

// TestExportImportCommands runs export and import -format shardlease-json
// against the emulators: the export is imported into another table, kept
// progress is skipped, and -overwrite puts the table back to the export.
func TestExportImportCommands(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	kc := emulator.Kinesis(t)
	stream, seqs := streamWithRecords(t, kc, "cli-export", 3)
	key := shardlease.LeaseKey{Stream: stream, Shard: shard(0)}
	l := f.checkpointed(t, key, "pod-0", seqs[1])
	_, err := f.store.Release(t.Context(), l)
	require.NoError(t, err)

	r := f.run(t, env{}, "export", "-stream", stream)
	require.Equal(t, 0, r.code, r.stderr)
	cps, err := shardlease.ReadCheckpoints(strings.NewReader(r.stdout))
	require.NoError(t, err)
	assert.Equal(t, f.table, cps.Table)
	require.Len(t, cps.Shards, 1)
	assert.Equal(t, seqs[1], cps.Shards[0].Checkpoint)
	file := filepath.Join(t.TempDir(), "checkpoints.json")
	require.NoError(t, os.WriteFile(file, []byte(r.stdout), 0o600))

	g := newFixture(t)
	args := []string{"-format", "shardlease-json", "-from", file, "-kinesis-endpoint", emulator.KinesisEndpoint(t)}
	r = g.run(t, env{}, "import", append(args, "-json")...)
	require.Equal(t, 0, r.code, r.stderr)
	var rep importJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
	assert.Equal(t, 1, rep.Copied)
	assert.Equal(t, "shardlease-json", rep.Format)
	assert.Equal(t, seqs[1], g.get(t, key).Checkpoint)

	moved, err := g.store.Acquire(t.Context(), key, "pod-1", g.get(t, key).Counter)
	require.NoError(t, err)
	moved, err = g.store.Checkpoint(t.Context(), moved, seqs[2], -1, time.Now())
	require.NoError(t, err)
	_, err = g.store.Release(t.Context(), moved)
	require.NoError(t, err)
	r = g.run(t, env{}, "import", args...)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "already has progress")
	assert.Equal(t, seqs[2], g.get(t, key).Checkpoint, "progress is kept")

	r = g.run(t, env{}, "import", append(args, "-overwrite")...)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "1 copied")
	assert.Equal(t, seqs[1], g.get(t, key).Checkpoint, "back to the exported state")
	assert.False(t, g.get(t, key).Held())

	r = g.run(t, env{}, "import", append(args, "-stream", "other")...)
	require.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, "the export in "+file+" is of stream "+stream)
	r = g.run(t, env{}, "import", "-format", "kcl", "-from", "old-app", "-stream", stream, "-overwrite")
	require.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, "-overwrite: only with -format shardlease-json")
	r = g.run(t, env{}, "import", "-format", "shardlease-json", "-from", filepath.Join(t.TempDir(), "none.json"))
	require.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "shardlease export -table TABLE -stream STREAM > FILE")
}
