// Package console is sluice's operator's surface, the fifth of its parts
// (gate, relay, worker, coordinator, console): the admin API under /api/v1/
// (bearer tokens with the roles read and admin; docs/admin.md), which the
// `sluice` admin commands (stats, dlq, rate, limits, groups, scale, canary
// status) call, and the web dashboard at / (package console/dashboard;
// docs/dashboard.md). It reads and writes the stores directly: the queues'
// state, dead sets and groups in Redis; the relays' rates, the execution
// limits and the scale pins in Consul (checked with the parsers of the
// parts that read them: internal/limits, internal/scaling); the relay's
// <topic>.dlq and lag in Kafka. So any number of consoles answer the same,
// and one keeps answering while the coordinator stands by or is down.
//
// sluice console runs one alone. By default sluice coordinator runs one in
// its process, on its listener (--console), so that a deployment keeps one
// listener for both; the console then shows what only that coordinator
// knows, through Config.Coordinator: whether it holds the lock, its
// scaler's targets and the scaling parameters in force.
// docs/architecture.md shows the flow between the parts, what each owns and
// which of this package's files to read first.
//
// Like each of sluice's parts, a console is started in five steps, which
// sluice console, sluice coordinator, sluice dev and a program that embeds
// the console share: DefaultConfig returns a Config whose every field
// states its default; Config.RegisterFlags binds sluice console's flags to
// a Config (internal/cli.Parse adds their SLUICE_* fallbacks); New checks
// the Config, with errors that name the field, and builds the console;
// Console.Run keeps it until the context ends and then closes its clients,
// for a program that serves Handler itself (as sluice coordinator does on
// its listener); Console.Serve serves Handler with /healthz, /readyz and
// /metrics on a listener, as sluice console does on Config.Listen.
package console
