// Package gate is sluice's HTTP front door (Slack's Kafkagate), the first
// of its five parts (gate, relay, worker, coordinator, console): it
// validates job envelopes and writes them synchronously to Kafka, answering
// only once Kafka acknowledged them. It keeps no state of its own, so any
// number of gates can run side by side. docs/architecture.md shows the flow
// between the parts, what each owns and which of this package's files to
// read first; docs/gate.md and docs/groups.md are the gate's HTTP API.
//
// Like each of sluice's parts, a gate is started in five steps, which sluice
// gate, sluice dev and a program that embeds the gate share: DefaultConfig
// returns a Config whose every field states its default; Config.RegisterFlags
// binds sluice gate's flags to a Config (internal/cli.Parse adds their
// SLUICE_* fallbacks); New checks the Config, with errors that name the
// field, and builds the gate; Gate.Run keeps its topic list fresh and closes
// its producer when the context ends, for a program that serves Handler
// itself; Gate.Serve serves Handler on a listener, as sluice gate does on
// Config.Listen.
package gate
