// Package prevrelease builds a worker of an earlier release of this module
// from the repository's own history and runs it as a process, so that a
// test can run a fleet of two releases on one lease table: an upgrade or a
// downgrade while the release before it still runs.
//
// Build exports one commit with git archive, writes a small main package
// into a module of its own that replaces this module with the export, and
// builds it with the go command. The worker it builds runs one Consumer of
// that release on a DynamoStore, with the endpoints, table, stream, owner
// id and lease timings its flags name, and appends one line per handled
// record to a file (see Span). Start runs it; Stop ends it gracefully
// (SIGTERM: its leases are released) and Kill ends it as a crash (SIGKILL).
//
// Cached keeps the binary in a cache directory, keyed by the commit, the Go
// version and the worker's source, so that later runs skip the build.
// Nothing here imports testing: a test calls Cached once per test binary
// and skips when ErrUnavailable says git or the go command is missing, or
// the clone lacks the commit.
package prevrelease
