package emulator

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"go.uber.org/goleak"
)

// sharedStartTimeout bounds the first-use install and start of a shared
// server (the npm install dominates on a fresh machine).
const sharedStartTimeout = installTimeout + startTimeout

// shared is one lazily started server for the whole test binary.
type shared struct {
	name  string
	start func(context.Context) (*Server, error)

	once   sync.Once
	mu     sync.Mutex // guards server and closed
	server *Server
	closed bool
	err    error
}

var (
	sharedDynamo  = &shared{name: "dynalite", start: StartDynalite}
	sharedKinesis = &shared{name: "kinesalite", start: StartKinesalite}
)

// endpoint starts the server on first use and returns its endpoint; it skips
// the test under -short and fails it if the server cannot be started.
func (s *shared) endpoint(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skipf("needs the %s emulator (Node.js); not started under -short", s.name)
	}
	s.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), sharedStartTimeout)
		defer cancel()
		srv, err := s.start(ctx)
		s.mu.Lock()
		defer s.mu.Unlock()
		s.server, s.err = srv, err
		if err == nil && s.closed { // Main already closed the shared servers
			s.err = errors.New("emulator: shared " + s.name + " requested after the tests finished")
			_ = srv.Close()
		}
	})
	if s.err != nil {
		t.Fatal(s.err)
	}
	return s.server.Endpoint
}

// close stops the server if it was started.
func (s *shared) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.server == nil {
		return nil
	}
	return s.server.Close()
}

// DynamoEndpoint returns the endpoint URL of the test binary's shared
// dynalite, starting it (and installing it, once per machine) on first use.
// Under go test -short it skips the test; if the emulator cannot be started
// it fails the test with what to do about it.
func DynamoEndpoint(t testing.TB) string {
	t.Helper()
	return sharedDynamo.endpoint(t)
}

// KinesisEndpoint returns the endpoint URL of the test binary's shared
// kinesalite, starting it (and installing it, once per machine) on first use.
// Under go test -short it skips the test; if the emulator cannot be started
// it fails the test with what to do about it.
func KinesisEndpoint(t testing.TB) string {
	t.Helper()
	return sharedKinesis.endpoint(t)
}

// SDKEnv points the AWS SDK's default configuration, for the rest of the
// test, at the shared emulators (see DynamoEndpoint and KinesisEndpoint),
// with dummy credentials and no config files, so that nothing real is read
// or fetched: no profile, role, IMDS or configured endpoint of the machine.
func SDKEnv(t testing.TB) {
	t.Helper()
	dynamo, kin := DynamoEndpoint(t), KinesisEndpoint(t)
	dir := t.TempDir()
	t.Setenv("AWS_ENDPOINT_URL_DYNAMODB", dynamo)
	t.Setenv("AWS_ENDPOINT_URL_KINESIS", kin)
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDTEST")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test-secret")
	t.Setenv("AWS_REGION", Region)
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "config"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "credentials"))
	for _, k := range []string{"AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION",
		"AWS_ENDPOINT_URL", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE"} {
		t.Setenv(k, "") // restores the old value when the test ends
		if err := os.Unsetenv(k); err != nil {
			t.Fatal(err)
		}
	}
}

// Dynamo returns a DynamoDB client for the shared dynalite; see
// DynamoEndpoint. Tables persist for the life of the test binary: name them
// with UniqueName.
func Dynamo(t testing.TB) *dynamodb.Client {
	t.Helper()
	return NewDynamoClient(DynamoEndpoint(t))
}

// Kinesis returns a Kinesis client for the shared kinesalite; see
// KinesisEndpoint. Streams persist for the life of the test binary: name
// them with UniqueName.
func Kinesis(t testing.TB) *kinesis.Client {
	t.Helper()
	return NewKinesisClient(KinesisEndpoint(t))
}

// MainParallel is Main for a package whose tests mostly wait in real time
// on the emulators (leases, take intervals): unless the command line sets
// -parallel (go test -parallel N), it runs up to n tests marked with
// t.Parallel at once instead of GOMAXPROCS of them. Such tests spend their
// time asleep, so on a machine of two cores GOMAXPROCS would leave the
// package's run as long as the sum of its waits:
//
//	func TestMain(m *testing.M) { emulator.MainParallel(m, 8) }
func MainParallel(m *testing.M, n int) {
	if !flag.Parsed() {
		flag.Parse()
	}
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given && n > 0 {
		if err := flag.Set("test.parallel", strconv.Itoa(n)); err != nil {
			fmt.Fprintf(os.Stderr, "emulator: set -test.parallel to %d: %v\n", n, err)
			os.Exit(2)
		}
	}
	Main(m)
}

// Main is the body of TestMain for every package whose tests use the
// emulators:
//
//	func TestMain(m *testing.M) { emulator.Main(m) }
//
// It runs the tests, stops the shared servers, closes the clients' idle
// connections, and then, if the tests passed, fails the binary if any
// goroutine is still running (goleak), reporting each one's stack. It does
// not return.
func Main(m *testing.M) {
	code := m.Run()
	for _, s := range []*shared{sharedDynamo, sharedKinesis, sharedKinesisLocal} {
		if err := s.close(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = max(code, 1)
		}
	}
	closeIdleConnections()
	if code == 0 {
		// Find retries for a while (about 1.5s at most) so that goroutines
		// already on their way out are not reported.
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: goroutines still running after the tests: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
