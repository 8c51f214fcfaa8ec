// Package consul is sluice's Consul plumbing: key names under the
// sluice/<stage>/ prefix, a lock with its own TTL session and a fencing token
// (the relay's per-topic lock, the coordinator's leader lock), and watches
// through blocking queries of one KV key (relay rates, scaling parameters)
// or of every key under a prefix (execution limits).
//
// Both halves are written for the failures Consul's own helpers leave to the
// caller. A lock holder stops writing when it has not renewed its session for
// longer than Consul would wait, whether or not Consul could tell it so, and
// every write it makes carries the lock's LockIndex so that a deposed holder
// is fenced out by whoever receives the write. A watch keeps the last value
// it saw while Consul is unreachable: a rate limit that vanishes with its
// agent would otherwise read as "unlimited".
//
// Config is how every part reaches Consul (address, ACL token, TLS): its
// Client turns a refusal into a DeniedError that names the part, the rule
// missing and the flag, and reads a token file again when Consul refuses
// it. PolicyFor is each part's least ACL policy (docs/secure/consul.md).
//
// Every call that waits takes a context. Durations that decide anything are
// fields with documented defaults, never constants buried in a loop.
package consul
