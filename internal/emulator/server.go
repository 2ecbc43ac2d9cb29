package emulator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// startTimeout bounds how long a server may take to report its port.
const startTimeout = 30 * time.Second

// closeTimeout bounds how long Close waits for the server to exit after its
// stdin is closed before it kills the process.
const closeTimeout = 10 * time.Second

// Server is one running emulator process bound to 127.0.0.1.
type Server struct {
	// Endpoint is the server's base URL, e.g. "http://127.0.0.1:38211".
	// Pass it as BaseEndpoint of an SDK client, or use NewDynamoClient or
	// NewKinesisClient.
	Endpoint string

	name   string
	cmd    *exec.Cmd
	stdin  io.Closer
	output *syncBuffer
	exited chan struct{} // closed when cmd.Wait returns
	err    error         // cmd.Wait's result; read after exited is closed

	closeOnce sync.Once
	closeErr  error
}

// StartDynalite installs dynalite (on first use) and starts it on an
// ephemeral port of 127.0.0.1. Tables are created, updated and deleted at
// once (no CREATING or DELETING delay); data lives in memory. ctx bounds the
// install and the start only; the server runs until Close.
func StartDynalite(ctx context.Context) (*Server, error) {
	return start(ctx, "dynalite", Options{})
}

// StartKinesalite installs kinesalite (on first use) and starts it on an
// ephemeral port of 127.0.0.1. Streams become ACTIVE at once and the shard
// limit is high enough for any test; data lives in memory. ctx bounds the
// install and the start only; the server runs until Close.
func StartKinesalite(ctx context.Context) (*Server, error) {
	return start(ctx, "kinesalite", Options{})
}

// Options changes where an emulator is installed and which port it listens
// on; the zero value is what the tests use.
type Options struct {
	// Dir holds the npm installation and the server script. Default:
	// .emulators at the module root (found from the working directory).
	Dir string
	// Port is the port on 127.0.0.1 to listen on. Default 0: a free one.
	Port int
}

// StartDynaliteWith is StartDynalite with options.
func StartDynaliteWith(ctx context.Context, o Options) (*Server, error) {
	return start(ctx, "dynalite", o)
}

// StartKinesaliteWith is StartKinesalite with options.
func StartKinesaliteWith(ctx context.Context, o Options) (*Server, error) {
	return start(ctx, "kinesalite", o)
}

// StartKinesisLocal installs kinesis-local (on first use) and starts it on
// an ephemeral port of 127.0.0.1, with every CREATING, UPDATING and DELETING
// state lasting 10ms. It serves enhanced fan-out, but its SubscribeToShard
// responses lack the initial-response event the SDK requires: use FanOut or
// StartFanOutShim, which put a shim in front of it. ctx bounds the install
// and the start only; the server runs until Close.
func StartKinesisLocal(ctx context.Context) (*Server, error) {
	return start(ctx, "kinesis-local", Options{})
}

// ErrPortInUse means the port asked for in Options is taken.
var ErrPortInUse = errors.New("emulator: port in use")

func start(ctx context.Context, name string, o Options) (*Server, error) {
	if o.Port < 0 || o.Port > 65535 {
		return nil, fmt.Errorf("emulator: %s: port %d is not in 0..65535", name, o.Port)
	}
	dir, err := ensureInstalled(ctx, o.Dir)
	if err != nil {
		return nil, err
	}
	args := []string{filepath.Join(dir, scriptName), name, strconv.Itoa(o.Port)}
	if name == "kinesis-local" {
		args = []string{filepath.Join(dir, kinesisLocalScriptName)}
	}
	cmd := exec.Command("node", args...)
	cmd.Dir = dir
	setParentDeathSignal(cmd)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("emulator: start %s: %w", name, err)
	}
	port := &firstLine{ch: make(chan string, 1)}
	out := &syncBuffer{}
	cmd.Stdout = port
	cmd.Stderr = out
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("emulator: start %s with node: %w; %s", name, err, missingNodeHint)
	}
	s := &Server{name: name, cmd: cmd, stdin: stdin, output: out, exited: make(chan struct{})}
	go func() {
		s.err = cmd.Wait()
		close(s.exited)
	}()

	timer := time.NewTimer(startTimeout)
	defer timer.Stop()
	var line string
	select {
	case line = <-port.ch:
	case <-s.exited:
		if strings.Contains(out.String(), "EADDRINUSE") {
			return nil, fmt.Errorf("%w: %s cannot listen on 127.0.0.1:%d: another process listens there; stop it or choose another port",
				ErrPortInUse, name, o.Port)
		}
		return nil, fmt.Errorf("emulator: %s exited before it reported its port (%v); its output:\n%s\n"+
			"if a module is missing or broken, delete %s and run the tests again",
			name, s.err, out.String(), dir)
	case <-timer.C:
		s.kill()
		return nil, fmt.Errorf("emulator: %s did not report its port within %s; its output:\n%s", name, startTimeout, out.String())
	case <-ctx.Done():
		s.kill()
		return nil, fmt.Errorf("emulator: start %s: %w", name, ctx.Err())
	}
	p, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || p <= 0 || p > 65535 {
		s.kill()
		return nil, fmt.Errorf("emulator: %s printed %q where its port was expected; its output:\n%s", name, line, out.String())
	}
	s.Endpoint = "http://127.0.0.1:" + strconv.Itoa(p)
	return s, nil
}

// Exited is closed when the server process has exited, by Close or on its
// own.
func (s *Server) Exited() <-chan struct{} { return s.exited }

// kill ends the process and waits for it; used when a start fails.
func (s *Server) kill() {
	_ = s.cmd.Process.Kill()
	<-s.exited
}

// Close stops the server: it closes the process's stdin, on which the server
// script exits, and kills the process if it has not exited within a few
// seconds. It reports an error if the server had crashed or had to be
// killed. Close is safe to call more than once.
func (s *Server) Close() error {
	if s == nil {
		return nil
	}
	s.closeOnce.Do(func() {
		select {
		case <-s.exited:
			s.closeErr = fmt.Errorf("emulator: %s at %s had exited before Close (%v); its output:\n%s",
				s.name, s.Endpoint, s.err, s.output.String())
			return
		default:
		}
		_ = s.stdin.Close()
		if s.name == "kinesis-local" {
			// It keeps no state worth an orderly exit, and under load its
			// event loop may not get to the closed stdin for a long while.
			_ = s.cmd.Process.Kill()
			<-s.exited
			return
		}
		timer := time.NewTimer(closeTimeout)
		defer timer.Stop()
		select {
		case <-s.exited:
			if s.err != nil {
				s.closeErr = fmt.Errorf("emulator: %s at %s exited with %v on Close; its output:\n%s",
					s.name, s.Endpoint, s.err, s.output.String())
			}
		case <-timer.C:
			s.kill()
			s.closeErr = fmt.Errorf("emulator: %s at %s did not exit within %s of its stdin closing and was killed",
				s.name, s.Endpoint, closeTimeout)
		}
	})
	return s.closeErr
}

// firstLine is the server's stdout: it hands over the first line (the port)
// and discards the rest.
type firstLine struct {
	mu   sync.Mutex
	buf  []byte
	sent bool
	ch   chan string
}

func (w *firstLine) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.sent {
		return len(p), nil
	}
	w.buf = append(w.buf, p...)
	if i := bytes.IndexByte(w.buf, '\n'); i >= 0 {
		w.sent = true
		w.ch <- string(w.buf[:i])
		w.buf = nil
	} else if len(w.buf) > 4096 {
		return 0, errors.New("emulator: no port line in the first 4 KiB of output")
	}
	return len(p), nil
}

// syncBuffer collects the server's stderr (capped) for error messages.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

const maxOutput = 64 << 10

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := maxOutput - b.buf.Len(); room > 0 {
		b.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.buf.Len() == 0 {
		return "(no output)"
	}
	return strings.TrimSpace(b.buf.String())
}
