package prevrelease

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// ErrUnavailable reports that a tool Build needs (git, or the go command)
// is not on the PATH, or that the repository does not hold the commit (a
// shallow clone): a test may skip. Any other failure of Build is an error
// in the build itself.
var ErrUnavailable = errors.New("prevrelease: cannot build the previous release here")

// modulePath is the path of this module, which the worker's module
// replaces with the exported commit.
const modulePath = "github.com/shardlease/shardlease"

// Build exports commit of the git repository at repo into dir, builds the
// worker of that release (see the package doc) and returns the path of its
// binary, in dir. dir should be empty and outlive every worker started
// from the binary. The go command runs with GOFLAGS="-mod=mod
// -buildvcs=false" and GOWORK=off, and fetches nothing the module cache
// already has.
func Build(ctx context.Context, repo, commit, dir string) (string, error) {
	gitBin, err := exec.LookPath("git")
	if err != nil {
		return "", fmt.Errorf("%w: git: %w; install git to run the tests of a fleet with the previous release", ErrUnavailable, err)
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("%w: go command: %w; put the go command on the PATH", ErrUnavailable, err)
	}
	src := filepath.Join(dir, "src")
	if err := export(ctx, gitBin, repo, commit, src); err != nil {
		return "", err
	}
	mod := filepath.Join(dir, "worker")
	if err := writeModule(src, mod); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "prevworker")
	cmd := exec.CommandContext(ctx, goBin, "build", "-o", bin, ".")
	cmd.Dir = mod
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod -buildvcs=false", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("prevrelease: go build of the worker of %s in %s: %w\n%s", commit, mod, err, out)
	}
	return bin, nil
}

// export writes the tree of commit of repo into dst, as git archive gives
// it.
func export(ctx context.Context, gitBin, repo, commit, dst string) error {
	cmd := exec.CommandContext(ctx, gitBin, "-C", repo, "archive", "--format=tar", commit)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("%w: git archive %s in %s: %w: %s; fetch the commit (a clone with its history, not a shallow one)",
			ErrUnavailable, commit, repo, err, strings.TrimSpace(stderr.String()))
	}
	return untar(bytes.NewReader(out), dst)
}

// untar writes the regular files and directories of the archive r into
// dst.
func untar(r io.Reader, dst string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("prevrelease: read the exported tree: %w", err)
		}
		name := filepath.Join(dst, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(name, filepath.Clean(dst)+string(filepath.Separator)) {
			return fmt.Errorf("prevrelease: the exported tree names %q, outside %s", h.Name, dst)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(name, 0o755)
		case tar.TypeReg:
			err = writeFile(name, tr, h.FileInfo().Mode().Perm())
		}
		if err != nil {
			return fmt.Errorf("prevrelease: write %s: %w", name, err)
		}
	}
}

func writeFile(name string, r io.Reader, perm os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// writeModule writes the worker's module into dir: its main package, and
// a go.mod with the requirements of the release's own go.mod (so the build
// resolves the versions the release was tested with) that replaces this
// module with src, and the release's go.sum.
func writeModule(src, dir string) error {
	gomod, err := os.ReadFile(filepath.Join(src, "go.mod"))
	if err != nil {
		return fmt.Errorf("prevrelease: the exported tree has no go.mod: %w", err)
	}
	lines := strings.Split(string(gomod), "\n")
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "module ") {
			lines[i] = "module prevworker"
		}
	}
	mod := strings.Join(lines, "\n") + fmt.Sprintf("\nrequire %s v0.0.0\n\nreplace %s => %s\n", modulePath, modulePath, src)
	sum, err := os.ReadFile(filepath.Join(src, "go.sum"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("prevrelease: read the release's go.sum: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("prevrelease: %w", err)
	}
	for name, body := range map[string][]byte{"go.mod": []byte(mod), "go.sum": sum, "main.go": []byte(workerMain)} {
		if err := os.WriteFile(filepath.Join(dir, name), body, 0o644); err != nil {
			return fmt.Errorf("prevrelease: write the worker's module: %w", err)
		}
	}
	return nil
}
