// Package chaos is sluice's chaos suite: it runs the real binaries as
// separate processes (two gates, two relays, two workers, two coordinators)
// against real Redis (AOF everysec), a Consul agent and a 3-broker kfake
// cluster, breaks them one at a time and mixed while jobs flow, and checks
// the guarantees of docs/chaos.md: nothing the gate accepted is lost, no
// idempotency key runs twice, only poison and always-failing jobs are
// dead-lettered, and the stage funnel balances. The suite is in the _test
// files; see docs/chaos.md, and docs/architecture.md for the guarantees
// and where each part states them.
package chaos
