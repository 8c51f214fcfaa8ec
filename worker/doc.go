// Package worker runs sluice's jobs, the third of its five parts (gate,
// relay, worker, coordinator, console): one consumer per Redis partition
// claims jobs from the queues of the topics it serves (weighted fair across
// topics, or in strict order; within a queue in weighted fair order of
// lanes), runs them on a resizable pool of goroutines under leases it keeps
// alive while they are held, holds them to the execution rate limits of
// their resources (ratelimit.go), and settles each: done, retried with
// backoff through the delayed set, or dead with its last error. It is also
// the public handler API for programs that embed a worker: typed handlers
// that get the payload decoded into a Go type (HandleFunc, HandleTyped,
// TypedJob) with per-type defaults (TypeTimeout, TypeMaxAttempts), raw ones
// (Handler, Worker.Handle), Permanent, RetryAfter and Middleware; and
// Config.ParseFlags and Worker.ListenAndServe, which run such a program as
// sluice worker runs (examples/worker). docs/architecture.md shows the flow between
// the parts, what each owns and which of this package's files to read
// first; docs/worker.md is the worker's guide.
//
// Like each of sluice's parts, a worker is started in five steps, which
// sluice worker, sluice dev and a program that embeds the worker share:
// DefaultConfig returns a Config whose every field states its default;
// Config.RegisterFlags binds sluice worker's flags to a Config
// (Config.ParseFlags parses them with their SLUICE_* fallbacks, as
// internal/cli.Parse does for the binary); New checks the Config,
// with errors that name the field, and builds the worker; Worker.Run consumes
// without a listener of its own; Worker.Serve adds /healthz, /readyz and
// /metrics on a listener, as sluice worker does on Config.Listen.
package worker
