package client

import (
	"time"

	"github.com/sluicehq/sluice/internal/job"
)

// Option sets one field of a job's envelope, or how the gate writes it.
// Each option's doc names the default it overrides; docs/client.md maps
// each to the envelope field and the gate's API.
type Option interface{ apply(*settings) }

type optionFunc struct {
	name string
	f    func(*settings)
}

func (o optionFunc) apply(s *settings) { s.set = append(s.set, o.name); o.f(s) }

func option(name string, f func(*settings)) Option { return optionFunc{name, f} }

// settings is what a call's options set: the envelope (the gate's own
// type; callers never see it), and what goes beside it.
type settings struct {
	env      job.Job
	delay    time.Duration
	acks     AckLevel
	callback string
	set      []string // the options given, by name, for the group check
}

func newSettings(opts []Option) settings {
	var s settings
	for _, o := range opts {
		if o != nil {
			o.apply(&s)
		}
	}
	return s
}

// AckLevel is how many Kafka replicas must hold a job before the gate
// answers (the Sluice-Acks header).
type AckLevel string

const (
	// AcksAll waits for every in-sync replica (the gate's idempotent
	// producer): the gate's default, Kafka's own producer default.
	AcksAll AckLevel = "all"
	// AcksLeader waits for the partition leader only: lower latency, and
	// a job is lost if the leader fails before a follower copied it.
	AcksLeader AckLevel = "leader"
)

// ID sets the job's id (envelope "id"; for EnqueueGroup, the group's id,
// and item i's job id is "<id>.<i>"), at most 128 bytes (117 for a group).
// Default: the client assigns a ULID, so that every resend is deduplicated
// as a client-chosen id (the gate would assign one too, but a resend of a
// gate-assigned id may run twice).
func ID(id string) Option { return option("ID", func(s *settings) { s.env.ID = id }) }

// Group puts the job in a group (envelope "group"): the fairness and
// fan-in unit, and the Kafka key, so a group's jobs keep their order in
// one Kafka partition. Default: no group; the job joins its Redis
// partition's shared lane (per tenant, else per topic). Not for
// EnqueueGroup, whose group is its ID.
func Group(group string) Option { return option("Group", func(s *settings) { s.env.Group = group }) }

// Tenant names the job's tenant (envelope "tenant"): shared lanes are per
// tenant, and a rate limit falls back to it. Default: none.
func Tenant(tenant string) Option {
	return option("Tenant", func(s *settings) { s.env.Tenant = tenant })
}

// Resource names what the job uses (envelope "resource"), the key of its
// execution rate limit (sluice limits set <resource> N). Default: none;
// the limit is the tenant's, else the type's.
func Resource(resource string) Option {
	return option("Resource", func(s *settings) { s.env.Resource = resource })
}

// Priority sets the job's class, 0 to 9 (envelope "priority"); workers
// turn classes into fair-share weights (priority + 1). Default: 0.
func Priority(p int) Option { return option("Priority", func(s *settings) { s.env.Priority = p }) }

// RunAt delays the job until t (envelope "run_at"), at most 366 days ahead.
// Default: run now. The last of RunAt and Delay given wins.
func RunAt(t time.Time) Option {
	return option("RunAt", func(s *settings) { s.env.RunAt, s.delay = t.UTC(), 0 })
}

// Delay delays the job by d from when the client sends it (envelope
// "run_at", computed on the client's clock at the first send; resends keep
// it). Default: run now. The last of RunAt and Delay given wins.
func Delay(d time.Duration) Option {
	return option("Delay", func(s *settings) { s.delay, s.env.RunAt = d, time.Time{} })
}

// MaxAttempts bounds the job's executions, 1 to 100 (envelope
// "max_attempts"). Default: the worker's (--max-attempts, 5 in sluice
// worker).
func MaxAttempts(n int) Option {
	return option("MaxAttempts", func(s *settings) { s.env.MaxAttempts = n })
}

// Timeout bounds one execution, at most 24h (envelope "timeout"). Default:
// the worker's (--timeout, 1m in sluice worker).
func Timeout(d time.Duration) Option {
	return option("Timeout", func(s *settings) { s.env.Timeout = job.Duration(d) })
}

// IdempotencyKey makes the job run at most once per key (envelope
// "idempotency_key"): a job whose key already completed within the key's
// TTL (24 h) is not run again. Default: none (ids dedupe resends; this
// dedupes distinct jobs that do the same work).
func IdempotencyKey(key string) Option {
	return option("IdempotencyKey", func(s *settings) { s.env.IdempotencyKey = key })
}

// Retain keeps the job's record and result for d after it ends, at most
// 30 days (envelope "retain"). Default: not kept (the worker's per-topic
// default may apply).
func Retain(d time.Duration) Option {
	return option("Retain", func(s *settings) { s.env.Retain = job.Duration(d) })
}

// Acks sets how many Kafka replicas must hold the jobs before the gate
// answers (the Sluice-Acks header). Default: the gate's, AcksAll.
func Acks(level AckLevel) Option { return option("Acks", func(s *settings) { s.acks = level }) }

// Callback is where the coordinator POSTs a bulk group's results once it
// completes (the group's "callback_url"). EnqueueGroup only. Default: no
// callback; poll GroupStatus.
func Callback(url string) Option { return option("Callback", func(s *settings) { s.callback = url }) }
