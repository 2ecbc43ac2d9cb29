package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// moduleRoot is the module's root directory, two levels above this package.
func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	_, err = os.Stat(filepath.Join(root, "go.mod"))
	require.NoError(t, err)
	return root
}

// readmeSection returns the text of the README section headed heading
// (a "## " line), up to the next "## " heading.
func readmeSection(t *testing.T, heading string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(moduleRoot(t), "README.md"))
	require.NoError(t, err)
	text := string(b)
	start := strings.Index(text, "\n"+heading+"\n")
	require.GreaterOrEqual(t, start, 0, "README.md has no section %q", heading)
	text = text[start+1:]
	if end := strings.Index(text[len(heading):], "\n## "); end >= 0 {
		text = text[:len(heading)+end]
	}
	return text
}

// wiringProgram returns the Go program of the README's "Wiring a service".
func wiringProgram(t *testing.T) string {
	t.Helper()
	section := readmeSection(t, "## Wiring a service")
	blocks := regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(section, -1)
	for _, b := range blocks {
		if strings.HasPrefix(b[1], "package main\n") {
			return b[1]
		}
	}
	t.Fatalf("README.md's Wiring a service has no Go block starting with \"package main\"")
	return ""
}

// moduleSteps returns the go mod commands of the README's Local development
// section, in order, without their comments: how a module of one's own
// requires a clone of this one.
func moduleSteps(t *testing.T) [][]string {
	t.Helper()
	var steps [][]string
	for _, line := range strings.Split(readmeSection(t, "## Local development"), "\n") {
		line, _, _ = strings.Cut(line, "#")
		if fields := strings.Fields(line); len(fields) > 2 && fields[0] == "go" && fields[1] == "mod" {
			steps = append(steps, fields)
		}
	}
	return steps
}

// buildWiringProgram follows the README's steps for a module of one's own
// in the directory that holds a clone: go mod init, go mod edit -replace to
// ../shardlease, the program saved as main.go, go mod tidy. The clone is
// this module's root, linked beside the new module. It then builds and vets
// the program, and returns the binary.
func buildWiringProgram(t *testing.T) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	require.NoError(t, err, "the go command is needed to build the README's program")
	dir := t.TempDir()
	require.NoError(t, os.Symlink(moduleRoot(t), filepath.Join(dir, "shardlease")))
	mod := filepath.Join(dir, "orders")
	require.NoError(t, os.Mkdir(mod, 0o755))
	steps := moduleSteps(t)
	want := []string{"go mod init ", "go mod edit -replace github.com/shardlease/shardlease=../shardlease", "go mod tidy"}
	require.Len(t, steps, len(want), "the README's go mod steps: %q", steps)
	bin := filepath.Join(dir, "orders-bin")
	for i, step := range append(steps, []string{"go", "build", "-o", bin, "."}, []string{"go", "vet", "."}) {
		if i < len(want) {
			require.True(t, strings.HasPrefix(strings.Join(step, " "), want[i]), "step %d of the README is %q, want %q...", i+1, step, want[i])
		}
		if i == len(want)-1 { // before go mod tidy, which reads the imports
			require.NoError(t, os.WriteFile(filepath.Join(mod, "main.go"), []byte(wiringProgram(t)), 0o644))
		}
		cmd := exec.Command(goTool, step[1:]...)
		cmd.Dir = mod
		// Offline: every module the program needs is in the module cache,
		// from this module's own build, and the checksums are computed
		// from it.
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOPROXY=off", "GOSUMDB=off", "GOFLAGS=-mod=mod")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s, in a module of one's own beside a clone:\n%s", strings.Join(step, " "), out)
	}
	gomod, err := os.ReadFile(filepath.Join(mod, "go.mod"))
	require.NoError(t, err)
	assert.Regexp(t, `(?m)^\s*(require\s+)?github\.com/shardlease/shardlease v0\.0\.0-`, string(gomod), "go mod tidy required the clone")
	return bin
}

// The README's wiring snippet is a complete program that compiles as
// pasted, in a module of one's own that requires a clone of this one as the
// README says.
func TestReadmeWiringProgramBuilds(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program with the go command")
	}
	buildWiringProgram(t)
}

// TestReadmeLocalPath follows the README's Local development section: the
// emulators command, the environment it prints, create-stream, create-table
// and put, then the README's program, which handles every record and stops
// cleanly on Ctrl-C, leaving every lease released with a checkpoint.
func TestReadmeLocalPath(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the emulators (Node.js) and builds a program with the go command")
	}
	section := readmeSection(t, "## Local development")
	for _, step := range []string{
		"go install ./cmd/shardlease",
		"shardlease emulators",
		"export AWS_REGION=us-east-1 AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local",
		"export AWS_ENDPOINT_URL_DYNAMODB=http://127.0.0.1:8000",
		"export AWS_ENDPOINT_URL_KINESIS=http://127.0.0.1:4567",
		"shardlease create-stream -stream orders -shards 2",
		"shardlease create-table -table orders-leases",
		"shardlease put -stream orders -count 10",
		"go mod edit -replace github.com/shardlease/shardlease=../shardlease",
		"go mod tidy",
		"go run .",
	} {
		require.Contains(t, section, step, "the README's local path has this step; the test runs it")
	}
	bin := buildWiringProgram(t)
	awsEnv(t)

	// 1. shardlease emulators (free ports here: the documented ones may be
	// taken on a test machine; the printed exports name the ports).
	emuCtx, stopEmulators := context.WithCancel(context.Background())
	defer stopEmulators()
	ready := make(chan [2]string, 1)
	type outcome struct {
		code           int
		stdout, stderr string
	}
	emuDone := make(chan outcome, 1)
	go func() {
		var stdout, stderr syncBuffer
		code := run(emuCtx, []string{"emulators", "-dynamodb-port", "0", "-kinesis-port", "0", "-dir", filepath.Join(moduleRoot(t), ".emulators")},
			&stdout, &stderr, env{emulatorsReady: func(d, k string) { ready <- [2]string{d, k} }})
		emuDone <- outcome{code, stdout.String(), stderr.String()}
	}()
	var endpoints [2]string
	select {
	case endpoints = <-ready:
	case o := <-emuDone:
		t.Fatalf("shardlease emulators exited with %d before it was ready:\n%s", o.code, o.stderr)
	case <-time.After(2 * time.Minute):
		t.Fatal("shardlease emulators not ready within 2 minutes")
	}

	// 2. The printed environment (set here for the commands run in process
	// and inherited by the service).
	t.Setenv("AWS_REGION", "us-east-1")
	t.Setenv("AWS_ACCESS_KEY_ID", "local")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "local")
	t.Setenv("AWS_ENDPOINT_URL_DYNAMODB", endpoints[0])
	t.Setenv("AWS_ENDPOINT_URL_KINESIS", endpoints[1])

	// 3. The stream, the table, ten records.
	for _, args := range [][]string{
		{"create-stream", "-stream", "orders", "-shards", "2"},
		{"create-table", "-table", "orders-leases"},
		{"put", "-stream", "orders", "-count", "10"},
	} {
		r := runCLI(t, env{}, args...)
		require.Equal(t, 0, r.code, "shardlease %s: %s", strings.Join(args, " "), r.stderr)
	}

	// 4. The service.
	svc := exec.Command(bin)
	svc.Env = os.Environ()
	stdout, err := svc.StdoutPipe()
	require.NoError(t, err)
	var stderr syncBuffer
	svc.Stderr = &stderr
	require.NoError(t, svc.Start())
	exited := make(chan error, 1)
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		exited <- svc.Wait()
	}()
	handled := map[string]bool{}
	record := regexp.MustCompile(`^shardId-\d+ (key-\d+): record (\d+)$`)
	deadline := time.After(time.Minute)
	for len(handled) < 10 {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the service exited (%v) after handling %d records; its log:\n%s", <-exited, len(handled), stderr.String())
			}
			m := record.FindStringSubmatch(l)
			require.NotNil(t, m, "unexpected output line %q", l)
			assert.Equal(t, "key-"+m[2], m[1])
			handled[m[1]] = true
		case <-deadline:
			_ = svc.Process.Kill()
			t.Fatalf("the service handled %d of 10 records in a minute; its log:\n%s", len(handled), stderr.String())
		}
	}

	// Ctrl-C: a clean stop, exit status 0.
	require.NoError(t, svc.Process.Signal(os.Interrupt))
	for range lines {
	}
	select {
	case err := <-exited:
		require.NoError(t, err, "the service's exit after Ctrl-C; its log:\n%s", stderr.String())
	case <-time.After(30 * time.Second):
		_ = svc.Process.Kill()
		t.Fatalf("the service did not stop within 30s of Ctrl-C; its log:\n%s", stderr.String())
	}
	t.Logf("the service's log:\n%s", stderr.String())
	assert.NotContains(t, stderr.String(), " ERROR ")
	assert.Contains(t, stderr.String(), " INFO lease taken ", "the default logger is slog.Default()")

	// Every lease released, with a checkpoint.
	r := runCLI(t, env{}, "list", "-table", "orders-leases", "-stream", "orders", "-json")
	require.Equal(t, 0, r.code, r.stderr)
	var leases []struct {
		Shard      string `json:"shard"`
		Owner      string `json:"owner"`
		Checkpoint string `json:"checkpoint"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &leases), r.stdout)
	require.Len(t, leases, 2)
	for _, l := range leases {
		assert.Empty(t, l.Owner, "shard %s released", l.Shard)
		assert.NotEmpty(t, l.Checkpoint, "shard %s checkpointed", l.Shard)
	}

	// Ctrl-C on the emulators.
	stopEmulators()
	select {
	case o := <-emuDone:
		require.Equal(t, 0, o.code, o.stderr)
		assert.Contains(t, o.stdout, "export AWS_ENDPOINT_URL_DYNAMODB="+endpoints[0])
		assert.Contains(t, o.stdout, "export AWS_ENDPOINT_URL_KINESIS="+endpoints[1])
		assert.Contains(t, o.stderr, "emulators stopped")
	case <-time.After(time.Minute):
		t.Fatal("shardlease emulators did not stop within a minute of its context's end")
	}
}

// syncBuffer is a strings.Builder safe for one writer and concurrent
// readers.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Until the module is published, no page tells a reader to go get it or to
// go install the CLI at a version: the README's Using a clone section says
// those fail and shows the clone, its go install, and the replace directive
// instead.
func TestReadmeInstallsFromAClone(t *testing.T) {
	section := readmeSection(t, "## Using a clone")
	for _, step := range []string{
		"git clone https://github.com/shardlease/shardlease",
		"go install ./cmd/shardlease",
		"go mod edit -replace github.com/shardlease/shardlease=../shardlease",
		"go mod tidy",
		"not published yet",
	} {
		assert.Contains(t, section, step)
	}
	root := moduleRoot(t)
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	published := regexp.MustCompile(`go (get|install) github\.com/shardlease/shardlease\S*`)
	for _, page := range append(pages, filepath.Join(root, "README.md")) {
		b, err := os.ReadFile(page)
		require.NoError(t, err)
		text := string(b)
		if filepath.Base(page) == "README.md" {
			text = strings.Replace(text, section, "", 1) // where they are said to fail
		}
		for _, m := range published.FindAllString(text, -1) {
			t.Errorf("%s: %q fails until the module is published; show the clone (README.md#using-a-clone)", filepath.Base(page), m)
		}
	}
}
