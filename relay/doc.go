// Package relay moves jobs from Kafka into Redis, the second of sluice's
// four parts (gate, relay, worker, coordinator). docs/architecture.md shows
// the flow between them, what each owns and which of this package's files
// to read first; docs/relay.md is the operator's guide.
package relay
