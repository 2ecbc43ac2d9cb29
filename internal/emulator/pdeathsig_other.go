//go:build !linux

package emulator

import "os/exec"

// setParentDeathSignal does nothing here: the server script exits when its
// stdin closes, which also happens when the test binary dies.
func setParentDeathSignal(*exec.Cmd) {}
