// Command shardlease inspects and repairs the lease table that shardlease
// consumers share in DynamoDB, and runs DynamoDB and Kinesis emulators for
// local development.
//
// Install it from a clone of the repository with
//
//	go install ./cmd/shardlease
//
// (or run it with "go run ./cmd/shardlease"); once the module is published,
// "go install github.com/shardlease/shardlease/cmd/shardlease@latest" does
// the same from anywhere.
//
// Usage:
//
//	shardlease <command> [flags]
//
// The commands are:
//
//	create-table  create the lease table (does nothing if it exists)
//	list          show every lease of a stream, or of every stream: owner, counter, checkpoint, ...
//	status        one view of a stream's (or every stream's) workers: leases held, lag,
//	              leases read by nobody
//	reset         move a shard's checkpoint (the lease must be free, or -force)
//	release       free a lease whose holder is dead
//	emulators     run DynamoDB and Kinesis emulators on this machine (Node.js and npm needed)
//	create-stream create a Kinesis stream on a local emulator
//	put           write test records to a Kinesis stream
//	consumers     list a stream's registered enhanced fan-out consumers
//	deregister-consumer
//	              deregister one (it is billed by the hour until then)
//	adopt-stream  after a stream was deleted and created again: drop the old rows,
//	              record the new stream
//	drain         ask a running worker to hand every lease to the others
//	export        print a stream's checkpoints as JSON (import -format shardlease-json
//	              writes them back)
//	import        copy progress from a kinsumer, vmware-go-kcl-v2 or Java KCL table into
//	              the lease table, checked against the stream first
//	rewind        move every shard of a stream to a time (lineage-aware, fenced)
//
// A mistyped command is answered with the nearest command.
//
// Run "shardlease <command> -h" for a command's flags and an example.
//
// # AWS configuration
//
// The AWS SDK's default configuration is used: credentials and region come
// from the usual environment variables (AWS_REGION, AWS_PROFILE,
// AWS_ACCESS_KEY_ID, ...), the shared config files and the instance's role.
// AWS_ENDPOINT_URL_DYNAMODB and AWS_ENDPOINT_URL_KINESIS (or AWS_ENDPOINT_URL
// for both) point the commands at other endpoints, such as local emulators.
// Each command that calls AWS also takes
//
//	-region REGION               overrides the configured region
//	-dynamodb-endpoint URL       overrides the DynamoDB endpoint, on every command
//	                             that calls DynamoDB (all but emulators, create-stream,
//	                             put, consumers and deregister-consumer)
//	-kinesis-endpoint URL        overrides the Kinesis endpoint, on every command
//	                             that calls Kinesis (create-stream, put, consumers,
//	                             deregister-consumer, import, adopt-stream, rewind)
//
// The older -endpoint still works where it did, with the meaning it had
// there: the DynamoDB endpoint on the commands that call DynamoDB, the
// Kinesis endpoint on the others. It is deprecated, and says which of the
// two flags replaces it.
//
// An endpoint that cannot be reached fails the command with an error that
// names the endpoint, the flag or variable that set it, and what to check.
//
// adopt-stream deletes rows without fencing: stop every consumer of the
// stream first (they refuse to run on the rows of a re-created stream
// anyway).
//
// # Writes are fenced
//
// reset, release and rewind change a lease row only through the lease
// store's conditional writes, as a consumer would: they acquire the lease
// with the counter they just read (under the owner id
// "shardlease-cli@HOSTNAME"), write, and release it. If a consumer writes to
// the row in between, the acquire fails and nothing is changed. A holder
// that was fenced out with -force (rewind: -handover) finds its next renewal
// or checkpoint refused (lease lost) and stops reading the shard; the lease
// it held is not released but left held by the command, so that consumers
// take it only once it has stood still for the holder's lease duration, when
// the holder has stopped: no two handlers run on one shard.
//
// Clocks are not trusted: the expiry list prints is the holder's own
// estimate, shown for information only. release proves that a holder is dead
// by watching the lease's counter stay still for -wait.
//
// # Exit status
//
// 0 on success, 1 when the command failed or refused, 2 for a usage error.
// With -json, results are printed to standard output as JSON, and so are
// errors: {"command": ..., "error": ..., "usage": ..., "exit_code": ...}.
// Errors also go to standard error as text. rewind -dry-run exits as the
// real run would: 1 when it would be refused, after printing the report
// (with -json, the report with "refused": true, and no error object).
//
// Mistakes are refused with exit status 1 and an error that names the
// table or stream and what to do: list, status, export and drain of a
// stream the table holds no row of (naming the streams it holds); drain of
// an owner that holds no lease (naming the owners that do); a drain that
// would leave the stream to nobody, unless -force.
package main
