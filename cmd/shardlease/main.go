package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/shardlease/shardlease"
)

// Exit codes.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// finalWriteTimeout bounds the writes that undo or finish a change once the
// command holds a lease (checkpoint, release): they run even after the
// command was interrupted, so that the lease is not left held by the command.
const finalWriteTimeout = 30 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, env{})
	stop()
	os.Exit(code)
}

// env holds what the commands take from their surroundings. The zero value
// is the real thing; tests replace parts.
type env struct {
	// hostname names this machine in the command's owner id. Default
	// os.Hostname.
	hostname func() (string, error)
	// poll is how often release re-reads a lease while it waits. Default:
	// a tenth of the wait, between 50ms and 1s.
	poll time.Duration
	// watching, when set, is called by release with the lease it has read
	// and is about to watch.
	watching func(shardlease.Lease)
	// acquiring, when set, is called by reset and release with the lease
	// they read, before they acquire it on its counter.
	acquiring func(shardlease.Lease)
	// emulatorsReady, when set, is called by emulators with the endpoints
	// once both emulators run.
	emulatorsReady func(dynamoEndpoint, kinesisEndpoint string)
	// describer, when set, answers adopt-stream's DescribeStreamSummary
	// instead of a Kinesis client.
	describer shardlease.StreamDescriber
}

// ownerID returns the identity the command's writes carry: the CLI's owner
// id for this host plus a random incarnation, unique per command.
func (e env) ownerID() string {
	hostname := os.Hostname
	if e.hostname != nil {
		hostname = e.hostname
	}
	host, err := hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	return shardlease.NewOwnerIdentity("shardlease-cli@" + host)
}

// command is one subcommand.
type command struct {
	name    string
	summary string
	// usage is printed by -h above the flags: a synopsis line, what the
	// command does, and an example.
	usage string
	// flags defines the command's flags on fs and returns the function that
	// runs it once they are parsed.
	flags func(fs *flag.FlagSet, c *cli) func(ctx context.Context) error
	// calls are the AWS services the command calls; each gets its
	// endpoint flag (see endpoints.go). The zero value is DynamoDB alone.
	calls services
}

// commands lists the subcommands in the order help shows them.
var commands = []*command{createTableCommand, listCommand, statusCommand, resetCommand, releaseCommand,
	emulatorsCommand, createStreamCommand, putCommand, consumersCommand, deregisterConsumerCommand}

func findCommand(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

// cli is what a running command works with.
type cli struct {
	stdout, stderr io.Writer
	env            env

	// Flags of every command that calls AWS: -region, the endpoint of
	// each service it calls, and the deprecated -endpoint.
	region, dynamoEndpoint, kinesisEndpoint, oldEndpoint string
	// ddb is the DynamoDB client, once made.
	ddb *dynamodb.Client
	// http is the transport of the AWS clients, closed when the command
	// ends.
	http *http.Transport
}

// usageError is a mistake in the command line: exit status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	for i, a := range args {
		if err, ok := a.(error); ok {
			args[i] = errText(err)
		}
	}
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// libPrefix starts the library's error messages.
var libPrefix = regexp.MustCompile(`(^|: )shardlease: `)

// errText is err's message without the library's "shardlease: " prefix
// (at its start or after a ": "), which the command's own prefix,
// "shardlease <command>: ", replaces.
func errText(err error) string { return libPrefix.ReplaceAllString(err.Error(), "$1") }

// run runs the command line args (without the program name) and returns the
// exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, e env) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "-help" || args[0] == "--help" {
		if len(args) > 1 && args[0] == "help" {
			if c := findCommand(args[1]); c != nil {
				st := &cli{}
				fs := newFlagSet(c, st)
				c.flags(fs, st)
				printUsage(stdout, c, fs)
				return exitOK
			}
			unknownCommand(stderr, args[1])
			return exitUsage
		}
		out, code := stdout, exitOK
		if len(args) == 0 {
			out, code = stderr, exitUsage
		}
		printCommands(out)
		return code
	}
	c := findCommand(args[0])
	if c == nil {
		unknownCommand(stderr, args[0])
		return exitUsage
	}
	st := &cli{stdout: stdout, stderr: stderr, env: e}
	fs := newFlagSet(c, st)
	exec := c.flags(fs, st)
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(stdout, c, fs)
			return exitOK
		}
		return st.fail(c, usagef("%v", err), jsonWanted(fs, args[1:]))
	}
	asJSON := jsonWanted(fs, args[1:])
	if fs.NArg() > 0 {
		return st.fail(c, usagef("unexpected argument %q; every value is given with a flag", fs.Arg(0)), asJSON)
	}
	if err := st.applyOldEndpoint(c); err != nil {
		return st.fail(c, err, asJSON)
	}
	defer st.closeClient()
	if err := exec(ctx); err != nil {
		return st.fail(c, err, asJSON)
	}
	return exitOK
}

// printedError is the error of a command that printed its result (with
// -json, a JSON object that says it failed) before it failed: fail prints
// the error as text only.
type printedError struct{ error }

func (e printedError) Unwrap() error { return e.error }

// jsonError is what a command run with -json prints on stdout when it
// fails, instead of its result.
type jsonError struct {
	Command string `json:"command"`
	Error   string `json:"error"`
	// Usage is set when the command line is wrong (exit status 2).
	Usage    bool `json:"usage"`
	ExitCode int  `json:"exit_code"`
}

// fail reports err and returns the exit status: as a JSON object on stdout
// with -json (and the message on stderr as well), as text on stderr
// otherwise.
func (st *cli) fail(c *command, err error, asJSON bool) int {
	err = st.withEndpointHint(err)
	var ue *usageError
	usage := errors.As(err, &ue)
	code := exitError
	if usage {
		code = exitUsage
	}
	var printed printedError
	if asJSON && !errors.As(err, &printed) {
		_ = st.printJSON(jsonError{Command: c.name, Error: errText(err), Usage: usage, ExitCode: code})
	}
	if usage {
		fmt.Fprintf(st.stderr, "shardlease %s: %s\nRun 'shardlease %s -h' for usage.\n", c.name, errText(err), c.name)
	} else {
		fmt.Fprintf(st.stderr, "shardlease %s: %s\n", c.name, errText(err))
	}
	return code
}

// jsonWanted reports whether the command has -json and it was set, also
// when parsing stopped before reaching it.
func jsonWanted(fs *flag.FlagSet, args []string) bool {
	f := fs.Lookup("json")
	if f == nil {
		return false
	}
	if f.Value.String() == "true" {
		return true
	}
	for _, a := range args {
		switch a {
		case "-json", "--json", "-json=true", "--json=true":
			return true
		}
	}
	return false
}

// newFlagSet returns c's flag set with the flags every command has. It
// prints nothing itself: run reports parse errors and -h.
func newFlagSet(c *command, st *cli) *flag.FlagSet {
	fs := flag.NewFlagSet("shardlease "+c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	addAWSFlags(fs, c, st)
	return fs
}

func printCommands(w io.Writer) {
	fmt.Fprint(w, "shardlease inspects and repairs the lease table of shardlease consumers,\n"+
		"and runs DynamoDB and Kinesis emulators for local development.\n\nUsage:\n\n\tshardlease <command> [flags]\n\nCommands:\n\n")
	for _, c := range commands {
		fmt.Fprintf(w, "\t%-19s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, "\nRun 'shardlease <command> -h' for a command's flags and an example.\n"+
		"AWS credentials, region and endpoints come from the SDK's usual environment\n"+
		"variables and config files; -region, -dynamodb-endpoint and -kinesis-endpoint\n"+
		"override them.\n")
}

func printUsage(w io.Writer, c *command, fs *flag.FlagSet) {
	fmt.Fprintf(w, "%s\n\nFlags:\n", strings.TrimSpace(c.usage))
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}

// requireFlags returns a usage error naming the first flag whose value is empty.
func requireFlags(flags ...string) error {
	for i := 0; i+1 < len(flags); i += 2 {
		if flags[i+1] == "" {
			return usagef("missing -%s", flags[i])
		}
	}
	return nil
}

// store returns a store over table after checking that the table exists
// with the right key schema.
func (st *cli) store(ctx context.Context, table string) (*shardlease.DynamoStore, error) {
	client, err := st.dynamo(ctx)
	if err != nil {
		return nil, err
	}
	store, err := shardlease.NewDynamoStore(client, table)
	if err != nil {
		return nil, err
	}
	if err := store.CheckTable(ctx); err != nil {
		return nil, err
	}
	return store, nil
}

func (st *cli) closeClient() {
	if st.http != nil {
		st.http.CloseIdleConnections()
	}
}

// printJSON writes v as indented JSON.
func (st *cli) printJSON(v any) error {
	enc := json.NewEncoder(st.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// leaseKey validates -stream and -shard.
func leaseKey(stream, shard string) (shardlease.LeaseKey, error) {
	if err := requireFlags("stream", stream, "shard", shard); err != nil {
		return shardlease.LeaseKey{}, err
	}
	key := shardlease.LeaseKey{Stream: stream, Shard: shard}
	if err := checkStreamName(stream); err != nil {
		return key, err
	}
	if err := shardlease.ValidateShardID(shard); err != nil {
		return key, usagef("-shard: %v", err)
	}
	return key, nil
}

// getLease reads key, adding to a not-found error how to find the right
// names.
func getLease(ctx context.Context, store *shardlease.DynamoStore, key shardlease.LeaseKey) (shardlease.Lease, error) {
	l, err := store.Get(ctx, key)
	if errors.Is(err, shardlease.ErrLeaseNotFound) {
		return l, fmt.Errorf("%w; check -stream and -shard ('shardlease list -table %s -stream %s' shows the stream's shards)", err, store.Table(), key.Stream)
	}
	return l, err
}

// ownerOrFree returns owner, or "free" when it is empty.
func ownerOrFree(owner string) string {
	if owner == "" {
		return "free"
	}
	return owner
}
