// Package chaos is sluice's chaos suite: it runs the real binaries as
// separate processes (two gates, two relays, two workers, two coordinators)
// against real Redis (AOF everysec), a Consul agent and a 3-broker kfake
// cluster (or three real Apache Kafka brokers, with the Kafka faults:
// make chaos KAFKA=apache), breaks them one at a time and mixed while
// jobs flow, and checks
// the guarantees of docs/chaos.md by job id (a set workload of mostly
// plain jobs): nothing the gate acknowledged is lost, no idempotency key
// runs twice, every rerun of a job without a key is explained, only
// poison, always-failing and worker-killing jobs are dead-lettered, and the
// stage funnel is exact. The suite is in the _test
// files; see docs/chaos.md, and docs/architecture.md for the guarantees
// and where each part states them.
package chaos
