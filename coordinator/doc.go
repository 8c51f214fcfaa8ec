// Package coordinator is sluice's Consul-elected coordinator. One process
// of a stage holds the lock sluice/<stage>/coordinator/lock; while it does,
// it runs a group watcher per Redis partition (groups.go): bulk groups whose
// jobs have all ended are aggregated by a Reducer and their callbacks POSTed,
// retried with backoff until delivered or given up. Beside them runs the
// scaler (scaler.go): every cycle it reads each partition's ready depth and
// live workers, and the algorithm of scaling.go (a pure function) decides
// SCALE_UP and SCALE_DOWN commands on per-worker queue depth (PWQD). The
// other processes stand by. The canary monitor will run under the same
// lock. docs/coordinator.md is the operator's guide.
package coordinator
