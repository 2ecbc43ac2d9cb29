package main

import (
	"bytes"
	"context"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A short run loses nothing, and the shards of the worker stopped partway
// move to the others.
func TestRun(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	err := run(t.Context(), []string{"-duration", "4s", "-rate", "100"}, &out)
	text := out.String()
	require.NoError(t, err, text)

	count := func(name string) string {
		m := regexp.MustCompile(`(?m)^  ` + name + `\s+(\d+) `).FindStringSubmatch(text)
		require.NotNil(t, m, "no %q line in the summary:\n%s", name, text)
		return m[1]
	}
	assert.Equal(t, "0", count("lost"), text)
	assert.NotEqual(t, "0", count("produced"), text)
	// The record that does not parse went to the dead-letter callback; every
	// other one was handled.
	assert.Equal(t, "1", count("dead-letter"), text)
	// It is named as the tables name records, by number, never by its
	// sequence number.
	assert.Regexp(t, `(?m)^t=\d+\.\ds  record 42 \(record \d+ of shardId-\d+\) went to the dead-letter callback after 3 failed attempts: record 42: cannot parse`, text)
	assert.NotRegexp(t, `\d{20}`, text, "a sequence number is printed")
	produced, handled := atoi(t, count("produced")), atoi(t, count("handled"))
	assert.Equal(t, produced-1, handled, text)

	stop := regexp.MustCompile(`stopping (worker-\d+) \(cancelling its Run context\); it holds (.+)`).FindStringSubmatch(text)
	require.NotNil(t, stop, "no worker was stopped:\n%s", text)
	stopped, shards := stop[1], strings.Fields(stop[2])
	require.NotEmpty(t, shards, text)
	for _, shard := range shards {
		m := regexp.MustCompile(regexp.QuoteMeta(shard) + ` moved from ` + stopped + ` to (worker-\d+) \(` + stopped + ` stopped\); worker-\d+ resumes after record \d+`).FindStringSubmatch(text)
		if assert.NotNil(t, m, "%s did not move:\n%s", shard, text) {
			assert.NotEqual(t, stopped, m[1], text)
		}
	}
	assertMovesAnnounced(t, text)

	// Each worker's leases are counted in words a reader can follow.
	perWorker := regexp.MustCompile(`(?m)^  worker-\d+\s+\d+ records handled; leases: \d+ taken free or expired, \d+ handed over by their holder, \d+ released, \d+ lost$`)
	assert.Len(t, perWorker.FindAllString(text, -1), 3, text)
	// A lease one worker handed another was announced as a move, unless
	// the run ended first.
	handedIn := 0
	for _, m := range regexp.MustCompile(`(?m)^  worker-\d+ .*, (\d+) handed over by their holder,`).FindAllStringSubmatch(text, -1) {
		handedIn += atoi(t, m[1])
	}
	handovers := len(regexp.MustCompile(`(?m) moved from worker-\d+ to worker-\d+ \(worker-\d+ handed it over to even out the load\)`).FindAllString(text, -1))
	assert.LessOrEqual(t, handovers, handedIn, text)
	if handedIn > 0 {
		assert.Positive(t, handovers, "no handover announced:\n%s", text)
	}
	assert.NotContains(t, text, "handed in", text)
}

// assertMovesAnnounced checks that every change of a shard's holder from
// one table to the next was announced in between: following the move lines
// from the holder a table shows leads to the holder the next table shows.
func assertMovesAnnounced(t *testing.T, text string) {
	t.Helper()
	move := regexp.MustCompile(`^t=\S+  (shardId-\d+) moved from (worker-\d+) to (worker-\d+) \(`)
	row := regexp.MustCompile(`^  (shardId-\d+)  (\S+) `)
	holder := map[string]string{} // shard → its holder, as the output last told
	for _, line := range strings.Split(text, "\n") {
		if m := move.FindStringSubmatch(line); m != nil {
			if h, ok := holder[m[1]]; ok {
				assert.Equal(t, h, m[2], "%q: the shard was last shown held by %s", line, h)
			}
			holder[m[1]] = m[3]
			continue
		}
		m := row.FindStringSubmatch(line)
		if m == nil || m[2] == "-" || strings.Contains(m[2], "+") {
			continue // no single holder: free, or in the middle of a handover
		}
		if h, ok := holder[m[1]]; ok {
			assert.Equal(t, h, m[2], "%q: the move from %s was not announced", line, h)
		}
		holder[m[1]] = m[2]
	}
	assert.NotEmpty(t, holder, "no table and no move in the output")
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	require.NoError(t, err)
	return n
}

// Cancelling the context (Ctrl-C) stops every worker, prints the counts so
// far and reports the interruption.
func TestRunInterrupted(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 1500*time.Millisecond)
	defer cancel()
	var out bytes.Buffer
	err := run(ctx, []string{"-duration", "1m"}, &out)
	text := out.String()
	require.Error(t, err, text)
	assert.Contains(t, text, "interrupted: stopping every worker", "run returned %v", err)
	assert.Regexp(t, `(?m)^  unhandled\s+\d+ `, text)
}

func TestRunUsage(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"-workers", "1"},
		{"-shards", "0"},
		{"-rate", "0"},
		{"-poison", "-1"},
		{"-duration", "10ms"},
		{"-nope"},
		{"extra"},
	} {
		var out bytes.Buffer
		err := run(t.Context(), args, &out)
		assert.True(t, errors.Is(err, errUsage), "%v: %v", args, err)
		assert.NotEmpty(t, out.String(), args)
	}
}
