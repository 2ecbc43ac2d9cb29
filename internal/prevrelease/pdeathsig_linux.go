package prevrelease

import (
	"os/exec"
	"syscall"
)

// setParentDeathSignal asks Linux to kill the worker if the process that
// started it (a test binary) dies.
func setParentDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
