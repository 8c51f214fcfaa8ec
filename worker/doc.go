// Package worker runs sluice's jobs, the third of its four parts (gate,
// relay, worker, coordinator), and is the Go API for the handlers of
// programs that embed a worker. docs/architecture.md shows the flow between
// the parts, what each owns and which of this package's files to read
// first; docs/worker.md is the worker's guide.
package worker
