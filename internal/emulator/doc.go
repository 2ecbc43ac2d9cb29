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
// Under go test -short the shared emulators are not started and the tests
// that ask for them are skipped with a reason, so go test -short ./... needs
// neither Node.js nor npm.
package emulator
