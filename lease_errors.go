package shardlease

import (
	"fmt"
	"strings"
)

// errPrefix starts the message of every error this package returns, once.
// Sentinels carry it; an error that wraps another one adds it in front and
// drops it from the wrapped error's text, so a message reads
// "shardlease: stream orders: table orders-leases: lease table not found: ..."
// and not "shardlease: stream orders: table orders-leases: shardlease: ...".
const errPrefix = "shardlease: "

// bare returns err's message without a leading errPrefix.
func bare(err error) string {
	if err == nil {
		return "<nil>"
	}
	return strings.TrimPrefix(err.Error(), errPrefix)
}

// prefixed returns msg with errPrefix in front, once.
func prefixed(msg string) string { return errPrefix + strings.TrimPrefix(msg, errPrefix) }

// errorf is fmt.Errorf for errors of this package: the message starts with
// errPrefix exactly once, whatever the format and the wrapped errors start
// with, and errors.Is and errors.As find every %w operand as with
// fmt.Errorf.
func errorf(format string, args ...any) error {
	wrapped := fmt.Errorf(format, args...)
	shown := make([]any, len(args))
	for i, a := range args {
		if e, ok := a.(error); ok && e != nil {
			shown[i] = bare(e)
		} else {
			shown[i] = a
		}
	}
	msg := fmt.Sprintf(strings.ReplaceAll(format, "%w", "%v"), shown...)
	return &prefixedError{msg: prefixed(msg), wrapped: wrapped}
}

// prefixedError is an error made by errorf.
type prefixedError struct {
	msg     string
	wrapped error // what fmt.Errorf made of the same format and operands
}

func (e *prefixedError) Error() string { return e.msg }

// Unwrap returns the %w operands.
func (e *prefixedError) Unwrap() []error {
	switch u := e.wrapped.(type) {
	case interface{ Unwrap() []error }:
		return u.Unwrap()
	case interface{ Unwrap() error }:
		return []error{u.Unwrap()}
	}
	return nil
}
