// Package kubernetes holds Kubernetes manifests for a shardlease consumer:
// deployment.yaml, a Deployment whose preStop hook drains the pod's leases
// before it stops, and scaledobject.yaml, a KEDA ScaledObject that scales it
// on the coordinating worker's workers-wanted gauge. The test beside them
// parses both and checks what they must agree on. It is a module of its own
// so that the library does not require a YAML parser.
package main
