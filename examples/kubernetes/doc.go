// Command kubernetes is the service deployment.yaml describes: one pod per
// worker of a shardlease consumer, its leases in DynamoDB, built into its
// image by the Dockerfile beside it and scaled on lag by scaledobject.yaml,
// a KEDA ScaledObject on the coordinating worker's workers-wanted gauge.
// handle, in main.go, is where a real service does its work.
//
// # Configuration
//
// Everything comes from the environment, and a mistake stops the service
// at start with an error naming the variable and what to set:
//
//	LEASE_TABLE       the DynamoDB lease table (required; shardlease create-table makes it)
//	STREAM            the Kinesis stream's name (required; not its ARN)
//	POD_NAME          the worker's owner id, from the downward API (fieldRef metadata.name);
//	                  unset, the library names the worker after its host name, and a Warn line says so
//	LEASE_DURATION    WithLeaseDuration (default 10s)
//	SHUTDOWN_TIMEOUT  WithShutdownTimeout (default 10s)
//	HTTP_ADDR         where the HTTP endpoints are served (default :8080)
//
// Region, credentials and endpoints are the AWS SDK's own: AWS_REGION,
// the pod's IAM role (or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY), and
// for emulators AWS_ENDPOINT_URL_DYNAMODB and AWS_ENDPOINT_URL_KINESIS.
// Logs go to stderr, one JSON object a line.
//
// # Endpoints
//
//	/metrics  the library's instruments in Prometheus's text format
//	/status   Consumer.StatusHandler: held shards, checkpoints, lag, role, as JSON
//	/ready    200 once the consumer has started, until it drains; 503 before and after
//
// /ready is the Deployment's readiness probe. It turns 200 at the
// consumer's "started" log line, once Run has checked the table and the
// stream and listed the shards, so a rollout (maxUnavailable 0) waits for a
// new pod that can consume before it stops an old one, and stalls instead
// of draining the fleet into pods whose start-up hangs. There is no liveness
// probe: restarting a worker whose handler is slow only moves the slow
// batch to another pod; the library reports stuck shards itself (the
// shardlease.retry.stuck gauge, /status).
//
// The metrics go through the OpenTelemetry SDK and its Prometheus exporter,
// as in examples/prometheus: the library records its instruments through
// the OpenTelemetry metric API (WithMeterProvider), so the exporter gives
// every one of them, with their stream, owner and shard labels, under the
// names the ScaledObject and the docs use (shardlease.workers.wanted is
// shardlease_workers_wanted). Writing the text by hand from Stats and
// Status would cover a few gauges and drift from those names. The cost is
// the dependencies, which this module carries apart from the library's.
//
// # Stopping: drain on SIGTERM
//
// On SIGTERM the service drains before it stops: /ready turns 503,
// Consumer.Drain stops taking leases, lets each one finish the batch in
// hand, writes its final checkpoint and releases it, and the other workers
// take it at their next listing; then Run's context is cancelled and the
// process exits 0. A second SIGTERM (or Ctrl-C) ends the process at once,
// as an unhandled signal does: leases it still holds expire for the others
// after a lease duration.
//
// The service drains itself rather than through a preStop hook running
// `shardlease drain`: the drain then runs on every SIGTERM (rollouts,
// kubectl delete, node drains, evictions) and outside Kubernetes too, it
// cannot name the wrong owner, it takes effect at once instead of at the
// worker's next renewal, and the image needs neither the CLI nor a shell.
// `shardlease drain -table T -stream S -owner POD` still works from an
// operator's machine, since the owner id is the pod's name.
//
// The longest stop is the drain's wait (LEASE_DURATION plus
// SHUTDOWN_TIMEOUT), Run's shutdown (SHUTDOWN_TIMEOUT, nothing left once
// drained) and the HTTP server's 5s: 35s with the defaults, which the
// Deployment's terminationGracePeriodSeconds (60s) covers. The test beside
// the manifests checks that sum against the program's own (stopBudget), and
// that the manifests set only the variables, port and paths the program
// uses.
//
// # Running it
//
// Against the emulators, from the repository's root:
//
//	go run ./cmd/shardlease emulators      # in a terminal of its own; export what it prints
//	go run ./cmd/shardlease create-table -table orders-leases
//	go run ./cmd/shardlease create-stream -stream orders -shards 4
//	cd examples/kubernetes
//	LEASE_TABLE=orders-leases STREAM=orders POD_NAME=orders-0 HTTP_ADDR=127.0.0.1:8080 go run .
//	curl -s http://127.0.0.1:8080/status
//
// The image, from the repository's root (the module builds against the
// library beside it, through go.mod's replace, until the library is
// published):
//
//	docker build -f examples/kubernetes/Dockerfile -t registry.example.com/orders-consumer:1.0.0 .
//
// This is a Go module of its own, so that the library requires neither the
// exporter nor a YAML parser. Its tests build the service and the CLI, run
// the CLI's emulators, run two pods of the service through a rollout's
// SIGTERM, and check the manifests and the Dockerfile against the program.
package main
