//go:build !linux

package prevrelease

import "os/exec"

// setParentDeathSignal does nothing here: a worker whose test binary dies
// runs on until its context ends; the test's cleanups kill it otherwise.
func setParentDeathSignal(*exec.Cmd) {}
