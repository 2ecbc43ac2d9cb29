package prevrelease

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Config says what one worker process runs.
type Config struct {
	Bin             string // the binary Build returned
	Dir             string // where its record file and log go
	DynamoEndpoint  string // DynamoDB endpoint URL
	KinesisEndpoint string // Kinesis endpoint URL
	Table, Stream   string
	Owner           string        // owner id; it names the files too
	Lease           time.Duration // lease duration
	Renew           time.Duration // renew interval; 0 for the release's default
	Take            time.Duration // take interval; 0 for the release's default
	Idle            time.Duration // idle poll interval; 0 for the release's default
	Work            time.Duration // how long each handler call works
}

// Worker is a running worker process.
type Worker struct {
	Owner string
	Out   string // its record file (see Span)
	Log   string // its standard error: the release's JSON log lines

	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // the exit's error; set before done is closed
}

// Start starts a worker process as c says.
func Start(c Config) (*Worker, error) {
	w := &Worker{Owner: c.Owner, Out: filepath.Join(c.Dir, c.Owner+".records"), Log: filepath.Join(c.Dir, c.Owner+".log"),
		done: make(chan struct{})}
	logf, err := os.OpenFile(w.Log, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("prevrelease: log of worker %s: %w", c.Owner, err)
	}
	defer logf.Close() // the child has its own descriptor
	w.cmd = exec.Command(c.Bin,
		"-dynamo", c.DynamoEndpoint, "-kinesis", c.KinesisEndpoint, "-table", c.Table, "-stream", c.Stream,
		"-owner", c.Owner, "-out", w.Out, "-lease", c.Lease.String(), "-renew", c.Renew.String(),
		"-take", c.Take.String(), "-idle", c.Idle.String(), "-work", c.Work.String())
	w.cmd.Stdout, w.cmd.Stderr = logf, logf
	setParentDeathSignal(w.cmd)
	if err := w.cmd.Start(); err != nil {
		return nil, fmt.Errorf("prevrelease: start worker %s (%s): %w", c.Owner, c.Bin, err)
	}
	go func() {
		w.err = w.cmd.Wait()
		close(w.done)
	}()
	return w, nil
}

// Exited reports whether the process has exited.
func (w *Worker) Exited() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// Stop sends SIGTERM (a graceful stop: the release's Run releases its
// leases and returns) and waits up to timeout for the exit; it returns the
// exit's error, nil for a clean exit. After timeout it kills the process
// and says so.
func (w *Worker) Stop(timeout time.Duration) error {
	if err := w.signal(syscall.SIGTERM); err != nil {
		return err
	}
	select {
	case <-w.done:
		return w.err
	case <-time.After(timeout):
		_ = w.Kill()
		return fmt.Errorf("prevrelease: worker %s did not exit within %v of SIGTERM; killed it (see %s)", w.Owner, timeout, w.Log)
	}
}

// Kill ends the process with SIGKILL, as a crash (no release, no final
// checkpoint), and waits for it. Killing an exited worker does nothing.
func (w *Worker) Kill() error {
	if err := w.signal(syscall.SIGKILL); err != nil {
		return err
	}
	<-w.done
	return nil
}

func (w *Worker) signal(sig os.Signal) error {
	if w.Exited() {
		return nil
	}
	if err := w.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("prevrelease: signal %v to worker %s: %w", sig, w.Owner, err)
	}
	return nil
}

// Span is one record handled by a worker: a line of its record file.
type Span struct {
	Owner, Shard, Seq string
	Start, End        time.Time // the handler call that handled it
}

// ReadSpans reads a record file. A file not written yet reads as empty; a
// last line cut short by a crash is left out.
func ReadSpans(path string) ([]Span, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("prevrelease: %w", err)
	}
	defer f.Close()
	var out []Span
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 5 {
			continue
		}
		start, err1 := strconv.ParseInt(fields[3], 10, 64)
		end, err2 := strconv.ParseInt(fields[4], 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		out = append(out, Span{Owner: fields[0], Shard: fields[1], Seq: fields[2], Start: time.Unix(0, start), End: time.Unix(0, end)})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("prevrelease: read %s: %w", path, err)
	}
	return out, nil
}
