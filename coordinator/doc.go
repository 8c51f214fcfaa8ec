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
// depth (PWQD). With canary topics the canary monitor (canary.go) runs under
// the same lock. The other processes stand by; every process serves the
// admin API and the dashboard (admin.go). docs/coordinator.md is the
// operator's guide; docs/architecture.md shows the flow between sluice's
// four parts (gate, relay, worker, coordinator), what each owns and which of
// this package's files to read first.
package coordinator
