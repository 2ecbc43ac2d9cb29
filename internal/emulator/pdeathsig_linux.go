package emulator

import (
	"os/exec"
	"syscall"
)

// setParentDeathSignal asks Linux to kill the server if the test binary dies,
// in addition to the server script's exit on the close of its stdin.
func setParentDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
