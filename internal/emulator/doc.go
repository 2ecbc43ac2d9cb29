// Package emulator starts local DynamoDB and Kinesis emulators for tests and
// builds AWS SDK clients that talk to them.
//
// The emulators are the npm packages dynalite (DynamoDB) and kinesalite
// (Kinesis), run with the machine's Node.js and bound to 127.0.0.1 only. On
// first use they are installed with npm into .emulators/ at the module root;
// an exclusive file lock keeps test binaries that run in parallel from
// installing at the same time, and later runs need no network.
//
// # Using it from a test package
//
//	func TestMain(m *testing.M) { emulator.Main(m) }
//
//	func TestSomething(t *testing.T) {
//		db := emulator.Dynamo(t)   // started once per test binary
//		ks := emulator.Kinesis(t)
//		stream := emulator.UniqueName("orders")
//		if err := emulator.CreateStream(t.Context(), ks, stream, 2); err != nil {
//			t.Fatal(err)
//		}
//		...
//	}
//
// A package whose tests mostly wait in real time runs them in parallel
// with MainParallel instead of Main; each test then names its tables and
// streams with UniqueName and sets no process-wide state.
//
// # Where the emulators differ from AWS
//
// Found with the SDK versions in go.mod against dynalite 4.0.0 and
// kinesalite 3.3.3; a test that needs one of these must not run on the
// emulators:
//
//   - dynalite answers UnknownOperationException to TransactWriteItems,
//     TransactGetItems, UpdateTimeToLive and the PartiQL operations.
//   - dynalite ignores ReturnValuesOnConditionCheckFailure: a
//     ConditionalCheckFailedException never carries the item.
//   - kinesalite answers UnknownOperationException to UpdateShardCount and
//     has no enhanced fan-out (SubscribeToShard, consumers). Use SplitShard
//     and MergeShards to reshard.
//   - kinesalite does not address streams by StreamARN alone (ListShards
//     with only StreamARN is an InvalidArgumentException); pass StreamName.
//     It ignores ListShards' ShardFilter and returns no ChildShards from
//     GetRecords: a closed shard ends with a nil NextShardIterator, and its
//     children are found with ListShards.
//   - kinesalite never answers an AT_TIMESTAMP read of a closed shard
//     whose records all precede the time: no records and no end, so a
//     reader of it (after a Rewind past the shard's close, which the
//     ignored ShardFilter cannot tell) waits for ever and its children are
//     never read. Rewind on the emulators only to times before a reshard.
//   - dynalite rethrows the error of a request whose client closed the
//     connection mid-request (a cancelled context), which would end the
//     process; the server script ignores such errors.
//
// The SDK's response checksum validation (DynamoDB's X-Amz-Crc32) works as
// is: dynalite sends a correct checksum. Kinesis requests are JSON 1.1,
// which kinesalite speaks.
//
// Under go test -short the shared emulators are not started and the tests
// that ask for them are skipped with a reason, so go test -short ./... needs
// neither Node.js nor npm.
package emulator
