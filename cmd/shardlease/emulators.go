package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/shardlease/shardlease/internal/emulator"
)

// Default ports of the emulators command: the ports DynamoDB Local and
// kinesalite use by default, so that endpoints written down elsewhere work.
const (
	defaultDynamoPort  = 8000
	defaultKinesisPort = 4567
)

var emulatorsCommand = &command{
	name:    "emulators",
	summary: "run DynamoDB and Kinesis emulators on this machine for local development",
	calls:   noService,
	usage: `
Usage: shardlease emulators [-dynamodb-port PORT] [-kinesis-port PORT] [-dir DIR]

Starts dynalite (a DynamoDB emulator) and kinesalite (a Kinesis emulator) on
127.0.0.1 and runs them until interrupted (Ctrl-C). They need Node.js 20 and
npm; the first run installs them with npm into DIR, later runs need no
network. Their data lives in memory: stopping them loses every table and
stream.

Once they are up it prints the environment a service needs to use them
(and the other commands: create-stream, create-table, put, list, ...):

	export AWS_REGION=us-east-1 AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local
	export AWS_ENDPOINT_URL_DYNAMODB=http://127.0.0.1:8000
	export AWS_ENDPOINT_URL_KINESIS=http://127.0.0.1:4567

The emulators check that requests are signed, not with what: any key will
do. A port of 0 picks a free one (the printed endpoints name it).

Example:

	shardlease emulators
`,
	flags: func(fs *flag.FlagSet, st *cli) func(context.Context) error {
		dynamoPort := fs.Int("dynamodb-port", defaultDynamoPort, "`port` of the DynamoDB emulator on 127.0.0.1 (0: a free one)")
		kinesisPort := fs.Int("kinesis-port", defaultKinesisPort, "`port` of the Kinesis emulator on 127.0.0.1 (0: a free one)")
		dir := fs.String("dir", "", "`directory` the emulators are installed into (default: shardlease/emulators in the user cache directory)")
		return func(ctx context.Context) error {
			for _, p := range []struct {
				flag string
				port int
			}{{"dynamodb-port", *dynamoPort}, {"kinesis-port", *kinesisPort}} {
				if p.port < 0 || p.port > 65535 {
					return usagef("-%s %d: use a port from 1 to 65535, or 0 for a free one", p.flag, p.port)
				}
			}
			if *dynamoPort != 0 && *dynamoPort == *kinesisPort {
				return usagef("-dynamodb-port and -kinesis-port are both %d: the two emulators need two ports", *dynamoPort)
			}
			installDir := *dir
			if installDir == "" {
				cache, err := os.UserCacheDir()
				if err != nil {
					return fmt.Errorf("no user cache directory to install the emulators into (%w); pass -dir", err)
				}
				installDir = filepath.Join(cache, "shardlease", "emulators")
			}
			fmt.Fprintf(st.stderr, "starting dynalite %s and kinesalite %s from %s (the first run installs them with npm) ...\n",
				emulator.DynaliteVersion, emulator.KinesaliteVersion, installDir)
			dyn, err := emulator.StartDynaliteWith(ctx, emulator.Options{Dir: installDir, Port: *dynamoPort})
			if err != nil {
				return portHint(err, "dynamodb-port")
			}
			defer dyn.Close()
			kin, err := emulator.StartKinesaliteWith(ctx, emulator.Options{Dir: installDir, Port: *kinesisPort})
			if err != nil {
				return portHint(err, "kinesis-port")
			}
			defer kin.Close()

			fmt.Fprintf(st.stdout, "export AWS_REGION=%s AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local\n", emulator.Region)
			fmt.Fprintf(st.stdout, "export AWS_ENDPOINT_URL_DYNAMODB=%s\n", dyn.Endpoint)
			fmt.Fprintf(st.stdout, "export AWS_ENDPOINT_URL_KINESIS=%s\n", kin.Endpoint)
			fmt.Fprintf(st.stderr, "DynamoDB emulator at %s, Kinesis emulator at %s; set the variables above in the shell of your service. Ctrl-C stops them.\n",
				dyn.Endpoint, kin.Endpoint)
			if st.env.emulatorsReady != nil {
				st.env.emulatorsReady(dyn.Endpoint, kin.Endpoint)
			}
			select {
			case <-ctx.Done():
			case <-dyn.Exited():
				return fmt.Errorf("the DynamoDB emulator stopped: %w", dyn.Close())
			case <-kin.Exited():
				return fmt.Errorf("the Kinesis emulator stopped: %w", kin.Close())
			}
			if err := errors.Join(kin.Close(), dyn.Close()); err != nil {
				return err
			}
			fmt.Fprintln(st.stderr, "emulators stopped")
			return nil
		}
	},
}

// portHint adds to a port conflict which flag changes the port.
func portHint(err error, flag string) error {
	if errors.Is(err, emulator.ErrPortInUse) {
		return fmt.Errorf("%w; pass -%s with another port (0 picks a free one) and use the endpoint printed", err, flag)
	}
	return err
}
