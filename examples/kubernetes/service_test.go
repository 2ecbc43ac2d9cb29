package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/shardlease/shardlease"
)

// repoRoot is the shardlease repository, which go.mod's replace points at.
const repoRoot = "../.."

// binDir holds the binaries the tests build, once each.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "orders-consumer-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

var (
	buildOnce sync.Map // binary name → *buildResult
)

type buildResult struct {
	once sync.Once
	path string
	err  error
}

// build builds the package pkg of the module in dir into binDir/name, once
// per test binary.
func build(t *testing.T, name, dir, pkg string) string {
	t.Helper()
	v, _ := buildOnce.LoadOrStore(name, &buildResult{})
	b := v.(*buildResult)
	b.once.Do(func() {
		b.path = filepath.Join(binDir, name)
		out, err := exec.Command("go", "build", "-C", dir, "-o", b.path, pkg).CombinedOutput()
		if err != nil {
			b.err = fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// service builds this service.
func service(t *testing.T) string { return build(t, "orders-consumer", ".", ".") }

// emulators are a DynamoDB and a Kinesis emulator, run by the CLI's
// emulators command, and clients of both.
type emulators struct {
	env map[string]string // the variables the command printed
	ddb *dynamodb.Client
	kin *kinesis.Client
}

// startEmulators runs `shardlease emulators` on free ports, with the
// emulators the repository's tests install in .emulators, until the test
// ends.
func startEmulators(t *testing.T) *emulators {
	t.Helper()
	cli := build(t, "shardlease", repoRoot, "./cmd/shardlease")
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(cli, "emulators", "-dynamodb-port", "0", "-kinesis-port", "0", "-dir", filepath.Join(root, ".emulators"))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		if err := cmd.Wait(); err != nil {
			t.Errorf("shardlease emulators: %v\n%s", err, stderr.String())
		}
	})
	env := map[string]string{}
	sc := bufio.NewScanner(stdout)
	for len(env) < 5 && sc.Scan() { // AWS_REGION and the keys, then the two endpoints
		for _, kv := range strings.Fields(strings.TrimPrefix(sc.Text(), "export ")) {
			if k, v, ok := strings.Cut(kv, "="); ok {
				env[k] = v
			}
		}
	}
	if env["AWS_ENDPOINT_URL_DYNAMODB"] == "" || env["AWS_ENDPOINT_URL_KINESIS"] == "" {
		t.Fatalf("shardlease emulators printed no endpoints (got %v):\n%s", env, stderr.String())
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	cfg := aws.Config{
		Region: env["AWS_REGION"],
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: env["AWS_ACCESS_KEY_ID"], SecretAccessKey: env["AWS_SECRET_ACCESS_KEY"]}, nil
		}),
	}
	return &emulators{
		env: env,
		ddb: dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(env["AWS_ENDPOINT_URL_DYNAMODB"]) }),
		kin: kinesis.NewFromConfig(cfg, func(o *kinesis.Options) { o.BaseEndpoint = aws.String(env["AWS_ENDPOINT_URL_KINESIS"]) }),
	}
}

// createStream creates an active stream of n shards and puts three records
// into each; it returns the sequence number of each shard's last record.
func (e *emulators) createStream(ctx context.Context, t *testing.T, name string, n int) map[string]string {
	t.Helper()
	if _, err := e.kin.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(name), ShardCount: aws.Int32(int32(n))}); err != nil {
		t.Fatal(err)
	}
	var shards []types.Shard
	waitFor(ctx, t, "the stream to be active", func() bool {
		out, err := e.kin.DescribeStream(ctx, &kinesis.DescribeStreamInput{StreamName: aws.String(name)})
		if err != nil || out.StreamDescription.StreamStatus != types.StreamStatusActive {
			return false
		}
		shards = out.StreamDescription.Shards
		return true
	})
	last := map[string]string{}
	for i := range 3 * len(shards) {
		sh := shards[i%len(shards)]
		out, err := e.kin.PutRecord(ctx, &kinesis.PutRecordInput{
			StreamName: aws.String(name), PartitionKey: aws.String("k"), Data: fmt.Appendf(nil, "order %d", i),
			ExplicitHashKey: sh.HashKeyRange.StartingHashKey,
		})
		if err != nil {
			t.Fatal(err)
		}
		last[aws.ToString(out.ShardId)] = aws.ToString(out.SequenceNumber)
	}
	if len(last) != n {
		t.Fatalf("records went to %d shards, want %d", len(last), n)
	}
	return last
}

// waitFor polls cond every 50ms until it holds, failing the test after 30s.
func waitFor(ctx context.Context, t *testing.T, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("waited 30s for %s", what)
		case <-tick.C:
		}
	}
}

// lockedBuffer is an io.Writer two goroutines may use.
type lockedBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// process is the service running as a child process.
type process struct {
	name string // its POD_NAME
	cmd  *exec.Cmd
	addr string       // where it serves HTTP
	logs lockedBuffer // its stderr
	done chan error   // cmd.Wait's result
}

// startService runs the service with env (and PATH) and waits until it
// serves HTTP. The test's end kills it if it still runs.
func startService(t *testing.T, env map[string]string) *process {
	t.Helper()
	p := &process{name: env[envPodName], cmd: exec.Command(service(t)), done: make(chan error, 1)}
	p.cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range env {
		p.cmd.Env = append(p.cmd.Env, k+"="+v)
	}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.logs.Write(append(sc.Bytes(), '\n'))
			var line struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "serving" {
				addr <- line.Addr
			}
		}
		p.done <- p.cmd.Wait()
	}()
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
		}
	})
	select {
	case p.addr = <-addr:
	case err := <-p.done:
		t.Fatalf("the service exited before serving: %v\n%s", err, p.logs.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("the service did not serve within 30s:\n%s", p.logs.String())
	}
	return p
}

// get returns the status code and body of GET path.
func (p *process) get(t *testing.T, path string) (int, []byte) {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second}
	res, err := client.Get("http://" + p.addr + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return res.StatusCode, body
}

// messages returns the msg of every log line the service wrote.
func (p *process) messages() []string {
	var out []string
	for line := range strings.Lines(p.logs.String()) {
		var l struct{ Msg string }
		if json.Unmarshal([]byte(line), &l) == nil {
			out = append(out, l.Msg)
		}
	}
	return out
}

// The service's configuration errors name the variable and what to set,
// and the process exits 1 without calling AWS.
func TestServiceRefusesAMissingConfiguration(t *testing.T) {
	cmd := exec.Command(service(t))
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "LEASE_DURATION=10"}
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("want exit status 1, got %v:\n%s", err, out)
	}
	for _, want := range []string{"LEASE_TABLE is not set: set it to", "STREAM is not set: set it to", `LEASE_DURATION="10" is not a positive duration`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the output does not say %q:\n%s", want, out)
		}
	}
}

// statusOf decodes /status.
func statusOf(t *testing.T, p *process) (out struct {
	Owner  string
	Role   string
	Shards []struct{ Shard, Checkpoint string }
}) {
	t.Helper()
	code, body := p.get(t, pathStatus)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", pathStatus, code, body)
	}
	if err := json.Unmarshal(body, &out); err != nil {
		t.Fatalf("GET %s: %v: %s", pathStatus, err, body)
	}
	return out
}

// The service consumes the stream its environment names, as the pod
// POD_NAME: /status shows it holding every lease with the last record's
// checkpoint, /metrics exposes the lease metrics and the workers-wanted gauge
// the ScaledObject queries, /ready says it consumes. SIGTERM drains it, as a
// rollout does: it exits 0 within the stop budget the Deployment's grace
// period covers, and the second pod holds every lease from the first one's
// final checkpoints, handling no record again. The second pod's SIGTERM
// leaves every lease free in the table, at its last record.
func TestServiceDrainsOnSIGTERM(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the emulators and the service")
	}
	ctx := t.Context()
	emu := startEmulators(t)
	const table, stream, shards = "orders-leases", "orders", 4
	last := emu.createStream(ctx, t, stream, shards)
	env := map[string]string{envTable: table, envStream: stream, envPodName: "orders-consumer-7d9f-aaaaa",
		envLease: "1s", envShutdown: "3s", envAddr: "127.0.0.1:0",
		"AWS_CONFIG_FILE": os.DevNull, "AWS_SHARED_CREDENTIALS_FILE": os.DevNull, "AWS_EC2_METADATA_DISABLED": "true"}
	for k, v := range emu.env {
		env[k] = v
	}
	failsWithoutTheTable(t, env)
	if err := shardlease.CreateTable(ctx, emu.ddb, table); err != nil {
		t.Fatal(err)
	}
	first := startService(t, env)
	waitHolding(ctx, t, first, last)
	if st := statusOf(t, first); shardlease.OwnerName(st.Owner) != env[envPodName] {
		t.Errorf("%s: owner %q, want the pod's name %q", pathStatus, st.Owner, env[envPodName])
	}
	if code, body := first.get(t, pathReady); code != http.StatusOK {
		t.Errorf("GET %s: %d %s, want 200 while consuming", pathReady, code, body)
	}
	wanted := scaledObjectMetric(t)
	waitFor(ctx, t, wanted+" and the lease metrics on "+pathMetrics, func() bool {
		_, body := first.get(t, pathMetrics)
		_, w := sample(body, wanted, stream)
		_, held := sample(body, "shardlease_leases_held", stream)
		n, _ := sample(body, "shardlease_records_handled_total", stream)
		return w && held && n == float64(3*shards)
	})

	env[envPodName] = "orders-consumer-7d9f-bbbbb"
	second := startService(t, env)
	waitFor(ctx, t, "the second pod to be ready", func() bool { code, _ := second.get(t, pathReady); return code == http.StatusOK })
	terminate(t, first, env)
	if msgs := first.messages(); !slices.Contains(msgs, "draining before stop") || !slices.ContainsFunc(msgs, func(m string) bool { return strings.HasPrefix(m, "drained") }) {
		t.Errorf("the first pod did not log its drain; it logged %q", msgs)
	}
	waitHolding(ctx, t, second, last)
	_, body := second.get(t, pathMetrics)
	if n, _ := sample(body, "shardlease_records_handled_total", stream); n != 0 {
		t.Errorf("the second pod handled %v records again, want none", n)
	}
	terminate(t, second, env)

	store, err := shardlease.NewDynamoStore(emu.ddb, table)
	if err != nil {
		t.Fatal(err)
	}
	leases, err := store.List(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	if len(leases) != shards {
		t.Fatalf("the table holds %d leases of %s, want %d", len(leases), stream, shards)
	}
	for _, l := range leases {
		if l.Owner != "" || l.Checkpoint != last[l.Key.Shard] {
			t.Errorf("%s: owner %q, checkpoint %q; want released at the last record %q", l.Key.Shard, l.Owner, l.Checkpoint, last[l.Key.Shard])
		}
	}
}

// failsWithoutTheTable checks that the service, before its lease table
// exists, is never ready and exits 1 with an error that names the table and
// the command that creates it.
func failsWithoutTheTable(t *testing.T, env map[string]string) {
	t.Helper()
	p := startService(t, env)
	select {
	case err := <-p.done:
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 {
			t.Fatalf("without the table: %v, want exit status 1\n%s", err, p.logs.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("without the table, the service still runs after 30s\n%s", p.logs.String())
	}
	logs := p.logs.String()
	if !strings.Contains(logs, "orders-consumer: ") || !strings.Contains(logs, "shardlease create-table -table "+env[envTable]) {
		t.Errorf("without the table, the service does not say how to create it:\n%s", logs)
	}
	if slices.Contains(p.messages(), "started") {
		t.Errorf("without the table, the service logged started:\n%s", logs)
	}
}

// waitHolding waits until p's /status shows it holding every shard of last
// at the checkpoint last gives it.
func waitHolding(ctx context.Context, t *testing.T, p *process, last map[string]string) {
	t.Helper()
	waitFor(ctx, t, "every shard held by "+p.name+" at its last record", func() bool {
		n := 0
		for _, sh := range statusOf(t, p).Shards {
			if sh.Checkpoint == last[sh.Shard] {
				n++
			}
		}
		return n == len(last)
	})
}

// terminate sends p SIGTERM and waits for it to exit 0 within the stop budget of
// env's settings.
func terminate(t *testing.T, p *process, env map[string]string) {
	t.Helper()
	s, err := loadSettings(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.done:
		if err != nil {
			t.Fatalf("%s after SIGTERM: %v, want exit status 0\n%s", p.name, err, p.logs.String())
		}
	case <-time.After(s.stopBudget()):
		t.Fatalf("%s still runs %v after SIGTERM\n%s", p.name, s.stopBudget(), p.logs.String())
	}
}

// sample returns the value of metric's sample for stream in a Prometheus
// text exposition, and whether there is one.
func sample(exposition []byte, metric, stream string) (float64, bool) {
	for line := range strings.Lines(string(exposition)) {
		if strings.HasPrefix(line, metric+"{") && strings.Contains(line, `stream="`+stream+`"`) {
			f := strings.Fields(line)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			return v, err == nil
		}
	}
	return 0, false
}
