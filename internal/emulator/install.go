package emulator

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// The emulator versions the harness installs. Both are pinned exactly: the
// tests rely on their behaviour, and a changed version must be a reviewed
// change.
const (
	DynaliteVersion   = "4.0.0"
	KinesaliteVersion = "3.3.3"
)

// installDirName is the directory at the module root that holds the npm
// installation and the server script; .gitignore lists it.
const installDirName = ".emulators"

// installTimeout bounds one npm install.
const installTimeout = 5 * time.Minute

// missingNodeHint is appended to every error caused by a missing Node.js.
const missingNodeHint = "install Node.js 20 and npm, e.g. apt-get install nodejs npm " +
	"(go test -short ./... runs only the in-process tests and needs neither)"

// installStamp is written after a successful install and names what was
// installed, so that a later run (or a parallel test binary) can skip npm.
var installStamp = fmt.Sprintf("dynalite@%s kinesalite@%s\n", DynaliteVersion, KinesaliteVersion)

// scriptName is the server script's file name in the install directory. It
// carries a hash of the script, so that binaries built from different
// versions of this package can share one install directory.
var scriptName = func() string {
	sum := sha256.Sum256([]byte(serverScript))
	return fmt.Sprintf("serve-%x.js", sum[:6])
}()

// serverScript starts one emulator on a loopback port (the second argument;
// 0 or none: an ephemeral one), prints the
// port on stdout and exits when its stdin closes, so a test binary that dies
// never leaves a node process behind.
const serverScript = `'use strict'
// Written by the test harness (internal/emulator); rewritten on every start.
const which = process.argv[2]
let server
if (which === 'dynalite') {
  server = require('dynalite')({ createTableMs: 0, deleteTableMs: 0, updateTableMs: 0 })
} else if (which === 'kinesalite') {
  server = require('kinesalite')({ createStreamMs: 0, deleteStreamMs: 0, updateStreamMs: 0, shardLimit: 100000 })
} else {
  process.stderr.write('usage: node serve.js dynalite|kinesalite\n')
  process.exit(2)
}
server.on('error', (err) => { process.stderr.write(String(err && err.stack || err) + '\n'); process.exit(1) })
// dynalite rethrows the error of a request whose client went away mid-body
// (a cancelled context, a timeout): that request is over, the server is not.
process.on('uncaughtException', (err) => {
  if (err && (err.code === 'ECONNRESET' || err.code === 'ECONNABORTED' || err.message === 'aborted')) return
  process.stderr.write(String(err && err.stack || err) + '\n')
  process.exit(1)
})
server.listen(Number(process.argv[3] || 0), '127.0.0.1', () => { process.stdout.write(server.address().port + '\n') })
process.stdin.on('end', () => process.exit(0))
process.stdin.on('error', () => process.exit(0))
process.stdin.resume()
`

// moduleRoot returns the nearest directory at or above the working directory
// that holds go.mod.
func moduleRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("emulator: find the module root: %w", err)
	}
	for dir := wd; ; {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("emulator: no go.mod at or above %s; run the tests from inside the module", wd)
		}
		dir = parent
	}
}

// lookNode checks that node and npm are on PATH.
func lookNode() error {
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("emulator: %s is not on PATH (%w); %s", tool, err, missingNodeHint)
		}
	}
	return nil
}

// ensureInstalled installs the pinned emulators into <module root>/.emulators
// unless they are already there, writes the server script, and returns the
// directory. It holds an exclusive lock on .emulators/.lock throughout, so
// parallel test binaries install once and never see a half-done install.
//
// A non-empty dir is used instead of <module root>/.emulators.
func ensureInstalled(ctx context.Context, dir string) (string, error) {
	if err := lookNode(); err != nil {
		return "", err
	}
	if dir == "" {
		root, err := moduleRoot()
		if err != nil {
			return "", err
		}
		dir = filepath.Join(root, installDirName)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("emulator: create %s: %w", dir, err)
	}
	unlock, err := lockFile(ctx, filepath.Join(dir, ".lock"))
	if err != nil {
		return "", err
	}
	defer unlock()

	if !installed(dir) {
		if err := npmInstall(ctx, dir); err != nil {
			return "", err
		}
	}
	script := filepath.Join(dir, scriptName)
	if b, err := os.ReadFile(script); err != nil || string(b) != serverScript {
		if err := os.WriteFile(script, []byte(serverScript), 0o644); err != nil {
			return "", fmt.Errorf("emulator: write %s: %w", script, err)
		}
	}
	return dir, nil
}

// installed reports whether dir holds a finished install of the pinned
// versions.
func installed(dir string) bool {
	stamp, err := os.ReadFile(filepath.Join(dir, "installed"))
	if err != nil || string(stamp) != installStamp {
		return false
	}
	return packageVersion(dir, "dynalite") == DynaliteVersion &&
		packageVersion(dir, "kinesalite") == KinesaliteVersion
}

// packageVersion returns the version of an installed npm package, or "".
func packageVersion(dir, pkg string) string {
	b, err := os.ReadFile(filepath.Join(dir, "node_modules", pkg, "package.json"))
	if err != nil {
		return ""
	}
	var meta struct {
		Version string `json:"version"`
	}
	if json.Unmarshal(b, &meta) != nil {
		return ""
	}
	return meta.Version
}

// npmInstall runs npm install for the pinned versions in dir and stamps the
// result.
func npmInstall(ctx context.Context, dir string) error {
	stamp := filepath.Join(dir, "installed")
	if err := os.Remove(stamp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("emulator: remove %s: %w", stamp, err)
	}
	manifest := fmt.Sprintf(`{
  "name": "shardlease-emulators",
  "private": true,
  "description": "DynamoDB and Kinesis emulators for the tests; installed by internal/emulator",
  "dependencies": {
    "dynalite": %q,
    "kinesalite": %q
  }
}
`, DynaliteVersion, KinesaliteVersion)
	if err := os.WriteFile(filepath.Join(dir, "package.json"), []byte(manifest), 0o644); err != nil {
		return fmt.Errorf("emulator: write %s/package.json: %w", dir, err)
	}

	ctx, cancel := context.WithTimeout(ctx, installTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "install", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "npm_config_update_notifier=false")
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (gave up after %s)", err, installTimeout)
		}
		return fmt.Errorf("emulator: npm install dynalite@%s kinesalite@%s in %s failed: %w\n%s\n"+
			"check that the npm registry is reachable (npm ping) and that Node.js is version 20 or newer (node --version); "+
			"delete %s to start the install afresh",
			DynaliteVersion, KinesaliteVersion, dir, err, strings.TrimSpace(out.String()), dir)
	}
	for pkg, want := range map[string]string{"dynalite": DynaliteVersion, "kinesalite": KinesaliteVersion} {
		if got := packageVersion(dir, pkg); got != want {
			return fmt.Errorf("emulator: npm install left %s at version %q in %s, want %s; delete %s and run the tests again",
				pkg, got, dir, want, dir)
		}
	}
	if err := os.WriteFile(stamp, []byte(installStamp), 0o644); err != nil {
		return fmt.Errorf("emulator: write %s: %w", stamp, err)
	}
	return nil
}
