// Package coordinator is sluice's Consul-elected coordinator. One process
// of a stage holds the lock sluice/<stage>/coordinator/lock; while it does,
// it runs a group watcher per Redis partition (groups.go): bulk groups whose
// jobs have all ended are aggregated by a Reducer and their callbacks POSTed,
// retried with backoff until delivered or given up. The other processes
// stand by. Per-partition scaling (PWQD) and the canary monitor are issue 6
// and will run under the same lock. docs/coordinator.md is the operator's
// guide.
package coordinator
