// Package relay will be sluice's Kafka -> Redis relay (Slack's JQRelay): per
// topic, the holder of a Consul lock consumes every partition, rate-limits by
// the Consul-set rate, guards Redis memory, and enqueues each job with one
// fenced, idempotent Lua script, committing a Kafka offset only after Redis
// accepted everything before it. It is built by issue 3 and, like every
// part, talks to the others only through internal/ contracts.
package relay
