package prevrelease

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// Cached is Build with a cache under root: the worker of commit, built by
// this Go version from this package's main source, is built once and kept
// in root/<commit>-<hash>/prevworker; later calls, of this process or
// another, return that binary. The export and the module are built in a
// temporary directory under root, removed before Cached returns.
func Cached(ctx context.Context, repo, commit, root string) (string, error) {
	gitBin, err := exec.LookPath("git")
	if err != nil {
		return "", fmt.Errorf("%w: git: %w; install git to run the tests of a fleet with the previous release", ErrUnavailable, err)
	}
	out, err := exec.CommandContext(ctx, gitBin, "-C", repo, "rev-parse", "--verify", commit+"^{commit}").Output()
	if err != nil {
		return "", fmt.Errorf("%w: commit %s is not in the repository at %s: %w; fetch it (a clone with its history, not a shallow one)",
			ErrUnavailable, commit, repo, err)
	}
	full := strings.TrimSpace(string(out))
	sum := sha256.Sum256([]byte(runtime.Version() + "\n" + workerMain))
	dir := filepath.Join(root, full+"-"+hex.EncodeToString(sum[:6]))
	bin := filepath.Join(dir, "prevworker")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("prevrelease: cache directory: %w", err)
	}
	tmp, err := os.MkdirTemp(root, "build-")
	if err != nil {
		return "", fmt.Errorf("prevrelease: cache directory: %w", err)
	}
	defer os.RemoveAll(tmp)
	built, err := Build(ctx, repo, full, tmp)
	if err != nil {
		return "", err
	}
	// A rename is atomic: a concurrent build of the same key replaces the
	// binary with an equal one, and no caller sees half a file.
	if err := os.Rename(built, bin); err != nil && !errors.Is(err, os.ErrExist) {
		return "", fmt.Errorf("prevrelease: keep the worker in the cache: %w", err)
	}
	return bin, nil
}
