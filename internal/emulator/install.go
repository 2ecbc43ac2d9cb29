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
	// KinesisLocalVersion is kinesis-local (kinesis-mock), which serves
	// enhanced fan-out (RegisterStreamConsumer, SubscribeToShard); see
	// FanOut.
	KinesisLocalVersion = "0.6.2"
)

// packages are the npm packages installed, with their pinned versions. A
// package missing from an existing install (one added since) makes
// ensureInstalled run npm install again, which adds it.
var packages = map[string]string{
	"dynalite":      DynaliteVersion,
	"kinesalite":    KinesaliteVersion,
	"kinesis-local": KinesisLocalVersion,
}

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
// It names the first two emulators only (as it did before kinesis-local was
// added), so that an older checkout sharing the directory does not take the
// install for a foreign one; installed checks every package's version.
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

// kinesisLocalScript starts kinesis-local as serverScript starts the others.
// It is a file of its own (named by its hash, as serverScript is).
const kinesisLocalScript = `'use strict'
// Written by the test harness (internal/emulator); rewritten on every start.
// kinesis-local reads its ports from the environment: take two free ones,
// start it from its own directory (it reads server.json from there), and
// print the plain HTTP port once it accepts connections.
function serveKinesisLocal() {
  const net = require('net')
  const path = require('path')
  const freePort = () => new Promise((resolve, reject) => {
    const s = net.createServer()
    s.on('error', reject)
    s.listen(0, '127.0.0.1', () => { const p = s.address().port; s.close(() => resolve(p)) })
  })
  process.stdin.on('end', () => process.exit(0))
  process.stdin.on('error', () => process.exit(0))
  process.stdin.resume()
  Promise.all([freePort(), freePort()]).then(([plain, tls]) => {
    const d = '10ms'
    Object.assign(process.env, {
      KINESIS_MOCK_PLAIN_PORT: String(plain), KINESIS_MOCK_TLS_PORT: String(tls),
      CREATE_STREAM_DURATION: d, DELETE_STREAM_DURATION: d, REGISTER_STREAM_CONSUMER_DURATION: d,
      DEREGISTER_STREAM_CONSUMER_DURATION: d, MERGE_SHARDS_DURATION: d, SPLIT_SHARD_DURATION: d,
      UPDATE_SHARD_COUNT_DURATION: d, SHARD_LIMIT: '100000', LOG_LEVEL: 'ERROR', SHOULD_PERSIST_DATA: 'false',
    })
    const dir = path.dirname(require.resolve('kinesis-local/package.json'))
    process.chdir(dir)
    require(path.join(dir, 'main.js'))
    const poll = () => {
      const c = net.connect(plain, '127.0.0.1')
      c.on('connect', () => { c.destroy(); process.stdout.write(plain + '\n') })
      c.on('error', () => setTimeout(poll, 50))
    }
    poll()
  }, (err) => { process.stderr.write(String(err) + '\n'); process.exit(1) })
}
serveKinesisLocal()
`

// kinesisLocalScriptName is kinesisLocalScript's file name; see scriptName.
var kinesisLocalScriptName = func() string {
	sum := sha256.Sum256([]byte(kinesisLocalScript))
	return fmt.Sprintf("serve-kinesis-local-%x.js", sum[:6])
}()

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
	for name, text := range map[string]string{scriptName: serverScript, kinesisLocalScriptName: kinesisLocalScript} {
		script := filepath.Join(dir, name)
		if b, err := os.ReadFile(script); err != nil || string(b) != text {
			if err := os.WriteFile(script, []byte(text), 0o644); err != nil {
				return "", fmt.Errorf("emulator: write %s: %w", script, err)
			}
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
	for pkg, want := range packages {
		if packageVersion(dir, pkg) != want {
			return false
		}
	}
	return true
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
    "kinesalite": %q,
    "kinesis-local": %q
  }
}
`, DynaliteVersion, KinesaliteVersion, KinesisLocalVersion)
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
		return fmt.Errorf("emulator: npm install dynalite@%s kinesalite@%s kinesis-local@%s in %s failed: %w\n%s\n"+
			"check that the npm registry is reachable (npm ping) and that Node.js is version 20 or newer (node --version); "+
			"delete %s to start the install afresh",
			DynaliteVersion, KinesaliteVersion, KinesisLocalVersion, dir, err, strings.TrimSpace(out.String()), dir)
	}
	for pkg, want := range packages {
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
