// Package coordinator is sluice's Consul-elected coordinator. One process
// of a stage holds the lock sluice/<stage>/coordinator/lock; while it does,
// it runs a group watcher per queue partition (a topic's queue on one Redis
// partition; groups.go), for every topic the relays registered and
// Config.Topics, started as topics appear: bulk groups whose jobs have all
// ended are aggregated by a Reducer and their callbacks POSTed, retried with
// backoff until delivered or given up. Beside them runs the scaler
// (scaler.go): every cycle it reads each partition's ready depth, summed over
// the topics, and live workers, and the algorithm of scaling.go (a pure
// function) decides SCALE_UP and SCALE_DOWN commands on per-worker queue
// depth (PWQD), honouring the operators' scale pins (pins.go). With canary
// topics the canary monitor (canary.go) runs under the same lock. The other
// processes stand by.
//
// The operator's surface, the admin API and the dashboard, is a part of its
// own, package console. sluice coordinator serves one on its listener too
// (Config.Handler), so a deployment keeps one listener; it shows what only
// a coordinator's memory knows through Holds, Target, Params and Pin.
// docs/coordinator.md is the operator's guide; docs/architecture.md shows
// the flow between sluice's parts (gate, relay, worker, coordinator,
// console), what each owns and which of this package's files to read
// first.
//
// Like each of sluice's parts, a coordinator is started in five steps, which
// sluice coordinator, sluice dev and a program that embeds the coordinator
// share: DefaultConfig returns a Config whose every field states its default;
// Config.RegisterFlags binds sluice coordinator's flags to a Config
// (internal/cli.Parse adds their SLUICE_* fallbacks); New checks the Config,
// with errors that name the field, and builds the coordinator;
// Coordinator.Run contends for the lock and works while it holds it, without
// a listener of its own; Coordinator.Serve adds /healthz, /readyz and
// /metrics (and Config.Handler) on a listener, as sluice coordinator does on
// Config.Listen.
package coordinator
