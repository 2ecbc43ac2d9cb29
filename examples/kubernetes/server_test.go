package main

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
)

// readyCode is the readiness probe's answer.
func readyCode(r *readiness) int {
	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, pathReady, nil))
	return rec.Code
}

// The probe answers 200 only between the consumer's "started" line and the
// drain, even when the log level hides Info lines, and a phase once left is
// never entered again.
func TestReadyOnlyWhileConsuming(t *testing.T) {
	ready := &readiness{}
	log := slog.New(startWatch{next: slog.NewTextHandler(discard{}, &slog.HandlerOptions{Level: slog.LevelWarn}), ready: ready})
	if code := readyCode(ready); code != http.StatusServiceUnavailable {
		t.Errorf("starting: %d, want 503", code)
	}
	log.With("stream", "orders").Info("lease created")
	if ready.phase() != starting {
		t.Errorf("after another line: %v, want starting", ready.phase())
	}
	log.With("stream", "orders").Info("started", "took", 56)
	if code := readyCode(ready); code != http.StatusOK {
		t.Errorf("consuming: %d, want 200", code)
	}
	ready.advance(draining)
	log.Info("started")
	if code := readyCode(ready); ready.phase() != draining || code != http.StatusServiceUnavailable {
		t.Errorf("draining, then a second started line: %v, %d; want draining, 503", ready.phase(), code)
	}
	ready.advance(stopped)
	if code := readyCode(ready); code != http.StatusServiceUnavailable {
		t.Errorf("stopped: %d, want 503", code)
	}
}

// discard is an io.Writer that drops what it gets.
type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
