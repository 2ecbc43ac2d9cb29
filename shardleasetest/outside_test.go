package shardleasetest_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// outsideHandler is a user's handler package: it sums the amounts of the
// orders it is handed.
const outsideHandler = `// Package orders is a service's handler, as its users write it.
package orders

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	"github.com/shardlease/shardlease"
)

// Totals sums order amounts.
type Totals struct {
	mu  sync.Mutex
	sum int
}

// Handle adds up the amounts of a batch; a bad amount fails the batch.
func (t *Totals) Handle(ctx context.Context, batch *shardlease.Batch) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, r := range batch.Records {
		n, err := strconv.Atoi(string(r.Data))
		if err != nil {
			return fmt.Errorf("order %s: %w", r.PartitionKey, err)
		}
		t.sum += n
	}
	return nil
}

// Sum is the total so far.
func (t *Totals) Sum() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.sum
}
`

// outsideTests is that package's tests, written with the kit only.
const outsideTests = `package orders_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/shardlease/shardlease"
	"github.com/shardlease/shardlease/shardleasetest"

	"example.com/orders"
)

func TestHandleOrders(t *testing.T) {
	k := shardleasetest.NewKinesis()
	if err := k.AddStream("orders", 2); err != nil {
		t.Fatal(err)
	}
	var entries []shardleasetest.Entry
	for i := range 100 {
		entries = append(entries, shardleasetest.Entry{PartitionKey: fmt.Sprint("order-", i), Data: []byte("2")})
	}
	if err := k.PutBatch("orders", entries...); err != nil {
		t.Fatal(err)
	}
	var totals orders.Totals
	got := shardleasetest.Collect(totals.Handle)
	c, err := shardlease.NewConsumer(k, shardlease.NewMemoryStore(), "orders", got.Handle,
		shardlease.WithIdlePollInterval(10*time.Millisecond), shardlease.WithLogger(shardleasetest.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	running := shardleasetest.Run(t, c)
	got.WaitFor(t, 100, time.Minute)
	if err := running.Stop(); err != nil {
		t.Fatal(err)
	}
	if totals.Sum() != 200 {
		t.Fatalf("sum %d, want 200", totals.Sum())
	}
}

func TestConformance(t *testing.T) {
	shardleasetest.RunStoreConformance(t, func(t *testing.T) shardlease.LeaseStore {
		return shardlease.NewMemoryStore()
	})
}
`

// outsideGoMod turns this module's go.mod into a user's: another module
// path, this module required and replaced by the directory root, and the
// same versions of everything else (so that go.sum covers them).
func outsideGoMod(t *testing.T, root string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "go.mod"))
	require.NoError(t, err)
	mod := regexp.MustCompile(`(?m)^module .*$`).ReplaceAllString(string(b), "module example.com/orders")
	return mod + "\nrequire github.com/shardlease/shardlease v0.0.0-00010101000000-000000000000\n" +
		"\nreplace github.com/shardlease/shardlease => " + root + "\n"
}

// A module outside this repository tests its handler with the kit and runs
// the conformance suite on MemoryStore, importing only public packages, as a
// user's module would against a release; both tests pass.
func TestKitFromAnotherModule(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and tests another module with the go command")
	}
	goTool, err := exec.LookPath("go")
	require.NoError(t, err, "the go command is needed to test another module")
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	require.NoError(t, err)

	dir := t.TempDir()
	for name, text := range map[string]string{
		"go.mod":         outsideGoMod(t, root),
		"go.sum":         string(sum),
		"orders.go":      outsideHandler,
		"orders_test.go": outsideTests,
	} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644))
	}
	for _, args := range [][]string{{"vet", "./..."}, {"test", "-count=1", "-v", "./..."}} {
		cmd := exec.Command(goTool, args...)
		cmd.Dir = dir
		// Everything is in the module cache already: never download.
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "go %s in a module outside this one:\n%s", strings.Join(args, " "), out)
		if args[0] == "test" {
			assert.Contains(t, string(out), "--- PASS: TestHandleOrders")
			assert.Contains(t, string(out), `level=INFO msg="lease taken" stream=orders`, "the consumer's log, in the test's")
			assert.Contains(t, string(out), "--- PASS: TestConformance")
			assert.Contains(t, string(out), "--- PASS: TestConformance/ConcurrentAcquireOneWins", "the suite's subtests ran")
			assert.NotContains(t, string(out), "--- FAIL")
		}
	}
}
