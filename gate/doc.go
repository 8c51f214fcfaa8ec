// Package gate is sluice's HTTP front door, the first of its four parts
// (gate, relay, worker, coordinator). docs/architecture.md shows the flow
// between them, what each owns and which of this package's files to read
// first; docs/gate.md and docs/groups.md are the gate's HTTP API.
package gate
