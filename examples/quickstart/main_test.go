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
	assert.Contains(t, text, "dead-letter callback: rec-000042 of shardId-", text)
	produced, handled := atoi(t, count("produced")), atoi(t, count("handled"))
	assert.Equal(t, produced-1, handled, text)

	stop := regexp.MustCompile(`stopping (worker-\d+) \(cancelling its Run context\); it holds (.+)`).FindStringSubmatch(text)
	require.NotNil(t, stop, "no worker was stopped:\n%s", text)
	stopped, shards := stop[1], strings.Fields(stop[2])
	require.NotEmpty(t, shards, text)
	for _, shard := range shards {
		m := regexp.MustCompile(regexp.QuoteMeta(shard) + ` moved ` + stopped + ` -> (worker-\d+)`).FindStringSubmatch(text)
		if assert.NotNil(t, m, "%s did not move:\n%s", shard, text) {
			assert.NotEqual(t, stopped, m[1], text)
		}
	}
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
