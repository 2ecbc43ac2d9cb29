//go:build !(darwin || dragonfly || freebsd || linux || netbsd || openbsd)

package emulator

import (
	"context"
	"errors"
)

// lockFile is not implemented here: the harness installs and runs the
// emulators on Unix systems only.
func lockFile(context.Context, string) (func(), error) {
	return nil, errors.New("emulator: the emulator harness runs on Linux and macOS only; go test -short ./... runs the in-process tests anywhere")
}
