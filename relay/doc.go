// Package relay moves jobs from Kafka into Redis (Slack's JQRelay), the
// second of sluice's five parts (gate, relay, worker, coordinator,
// console). For each topic it serves, a relay contends for the topic's
// Consul lock; the holder consumes every partition of the topic and moves
// the jobs into their Redis partitions, at most at the rate set in Consul
// and never while Redis memory is above the high watermark, committing a
// Kafka offset only after Redis accepted every job before it. Standby
// relays wait for the lock. Every Redis write carries the lock's fencing
// token, so a deposed relay that still runs writes nothing.
// docs/architecture.md shows the flow between the parts, what each owns and
// which of this package's files to read first; docs/relay.md is the
// operator's guide.
//
// Like each of sluice's parts, a relay is started in five steps, which sluice
// relay, sluice dev and a program that embeds the relay share: DefaultConfig
// returns a Config whose every field states its default; Config.RegisterFlags
// binds sluice relay's flags to a Config (internal/cli.Parse adds their
// SLUICE_* fallbacks); New checks the Config, with errors that name the
// field, and builds the relay; Relay.Run relays without a listener of its
// own; Relay.Serve adds /healthz, /readyz and /metrics on a listener, as
// sluice relay does on Config.Listen.
package relay
