// Command shardlease inspects and repairs the lease table that shardlease
// consumers share in DynamoDB, and runs DynamoDB and Kinesis emulators for
// local development.
//
// Install it with
//
//	go install github.com/shardlease/shardlease/cmd/shardlease@latest
//
// Usage:
//
//	shardlease <command> [flags]
//
// The commands are:
//
//	create-table  create the lease table (does nothing if it exists)
//	list          show every lease of a stream, or of every stream: owner, counter, checkpoint, ...
//	reset         move a shard's checkpoint (the lease must be free, or -force)
//	rewind        move every shard of a stream to a time (lineage-aware, fenced)
//	export        print a stream's checkpoints as JSON (import -format shardlease-json
//	              writes them back)
//	drain         ask a running worker to hand every lease to the others
//	release       free a lease whose holder is dead
//	import        copy progress from a kinsumer, vmware-go-kcl-v2 or Java KCL table into
//	              the lease table, checked against the stream first
//	emulators     run DynamoDB and Kinesis emulators on this machine (Node.js and npm needed)
//	create-stream create a Kinesis stream on a local emulator
//	put           write test records to a Kinesis stream
//	adopt-stream  after a stream was deleted and created again: drop the old rows,
//	              record the new stream
//	consumers     list a stream's registered enhanced fan-out consumers
//	deregister-consumer
//	              deregister one (it is billed by the hour until then)
//
// Run "shardlease <command> -h" for a command's flags and an example.
//
// # AWS configuration
//
// The AWS SDK's default configuration is used: credentials and region come
// from the usual environment variables (AWS_REGION, AWS_PROFILE,
// AWS_ACCESS_KEY_ID, ...), the shared config files and the instance's role.
// AWS_ENDPOINT_URL and AWS_ENDPOINT_URL_DYNAMODB point the command at
// another endpoint, such as a local emulator. Every command also takes
//
//	-region REGION      overrides the configured region
//	-endpoint URL       overrides the DynamoDB endpoint (and the environment's)
//
// import also reads the stream (ListShards, GetShardIterator) to check the
// rows against it, and adopt-stream describes it (DescribeStreamSummary);
// their -kinesis-endpoint URL (or AWS_ENDPOINT_URL_KINESIS) points that
// client at another endpoint.
//
// consumers and deregister-consumer call Kinesis only (DescribeStreamSummary,
// ListStreamConsumers, DescribeStreamConsumer, DeregisterStreamConsumer);
// their -endpoint is a Kinesis endpoint.
//
// adopt-stream deletes rows without fencing: stop every consumer of the
// stream first (they refuse to run on the rows of a re-created stream
// anyway).
//
// # Writes are fenced
//
// reset and release change a lease row only through the lease store's
// conditional writes, as a consumer would: they acquire the lease with the
// counter they just read (under the owner id "shardlease-cli@HOSTNAME"),
// write, and release it. If a consumer writes to the row in between, the
// acquire fails and nothing is changed. A holder that was fenced out with
// -force finds its next renewal or checkpoint refused (lease lost) and stops
// reading the shard.
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
// Errors also go to standard error as text.
package main
