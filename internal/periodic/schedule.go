// Package periodic is the contract of periodic jobs: a schedule as it is
// kept in Consul KV (sluice/<stage>/periodic/<name>), its slots, the job
// each slot makes, and the Scheduler the coordinator's leader runs to fire
// them (docs/periodic.md).
//
// A slot's job has a deterministic id, periodic:<name>:<unix seconds>, so
// that a slot fired twice (a leader that fails over mid-slot, two leaders
// for a split moment) is queued once: the relay drops a resend of a
// client-chosen id.
package periodic

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/sluicehq/sluice/internal/job"
)

// Schedule is one periodic job, the JSON value of
// sluice/<stage>/periodic/<name>. Exactly one of Cron and Every is set.
type Schedule struct {
	// Cron is a cron expression with an optional seconds field first
	// ("0 30 9 * * MON-FRI", "*/15 * * * *") or a descriptor
	// ("@hourly", "@daily"); read in Timezone.
	Cron string `json:"cron,omitempty"`
	// Every fires at each multiple of it since the Unix epoch ("30s",
	// "15m"), so every leader computes the same slots. At least 1s.
	Every job.Duration `json:"every,omitzero"`
	// Timezone is the IANA zone Cron is read in. Default "UTC".
	Timezone string `json:"timezone,omitempty"`

	// Topic is the topic the job is posted to. Required.
	Topic string `json:"topic"`
	// Type, Group, Tenant, Resource, Priority, Payload, MaxAttempts,
	// Timeout and Retain are the job's fields (docs/envelope.md).
	Type        string          `json:"type"`
	Group       string          `json:"group,omitempty"`
	Tenant      string          `json:"tenant,omitempty"`
	Resource    string          `json:"resource,omitempty"`
	Priority    int             `json:"priority,omitempty"`
	Payload     json.RawMessage `json:"payload,omitempty"`
	MaxAttempts int             `json:"max_attempts,omitempty"`
	Timeout     job.Duration    `json:"timeout,omitzero"`
	Retain      job.Duration    `json:"retain,omitzero"`

	// CatchUp is how many missed slots are fired late, the latest ones,
	// when the scheduler finds slots older than Grace (after an outage):
	// 0 (default) skips them all.
	CatchUp int `json:"catch_up,omitempty"`
	// Grace is how late a slot may be fired and still count as on time.
	// Default 1m: more than a coordinator's failover takes.
	Grace job.Duration `json:"grace,omitzero"`
	// Paused stops firing; slots that pass while paused are skipped, never
	// caught up on resume.
	Paused bool `json:"paused,omitempty"`
	// RunNow, when it changes to a new non-empty value, fires one job at
	// once, id periodic:<name>:now:<RunNow> (sluice periodic run-now).
	RunNow string `json:"run_now,omitempty"`
}

// DefaultGrace is a Schedule's Grace when it sets none.
const DefaultGrace = time.Minute

// Limits of a schedule.
const (
	MinEvery   = time.Second
	MaxCatchUp = 1000
	maxNameLen = 64
)

var validName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// CheckName accepts names that fit a Consul key segment and a job id.
func CheckName(name string) error {
	if len(name) == 0 || len(name) > maxNameLen || !validName.MatchString(name) {
		return fmt.Errorf("periodic: schedule name %q: want 1-%d letters, digits, '.', '_' or '-', starting with a letter or digit", name, maxNameLen)
	}
	return nil
}

var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Parsed is a checked schedule with its slot function.
type Parsed struct {
	Name string
	Schedule
	loc  *time.Location
	spec cron.Schedule // nil: Every
}

// Parse decodes and checks a schedule's JSON. Its errors name the field.
func Parse(name string, value []byte) (*Parsed, error) {
	if err := CheckName(name); err != nil {
		return nil, err
	}
	var s Schedule
	if err := json.Unmarshal(value, &s); err != nil {
		return nil, fmt.Errorf("periodic: schedule %s: %v", name, err)
	}
	return s.Check(name)
}

// Check validates s, named name, and returns it parsed. Its errors name
// the field at fault.
func (s Schedule) Check(name string) (*Parsed, error) {
	if err := CheckName(name); err != nil {
		return nil, err
	}
	p := &Parsed{Name: name, Schedule: s, loc: time.UTC}
	fail := func(field, format string, args ...any) (*Parsed, error) {
		return nil, fmt.Errorf("periodic: schedule %s: %s: %s", name, field, fmt.Sprintf(format, args...))
	}
	if s.Timezone != "" {
		loc, err := time.LoadLocation(s.Timezone)
		if err != nil {
			return fail("timezone", "%q is not an IANA time zone (%v)", s.Timezone, err)
		}
		p.loc = loc
	}
	switch {
	case s.Cron != "" && s.Every != 0:
		return fail("cron", "give cron or every, not both")
	case s.Cron != "":
		spec, err := cronParser.Parse(s.Cron)
		if err != nil {
			return fail("cron", "%q: %v", s.Cron, err)
		}
		p.spec = spec
	case time.Duration(s.Every) < MinEvery:
		if s.Every == 0 {
			return fail("cron", "required (or every)")
		}
		return fail("every", "%s is shorter than %s", time.Duration(s.Every), MinEvery)
	}
	if s.Topic == "" {
		return fail("topic", "required")
	}
	if s.CatchUp < 0 || s.CatchUp > MaxCatchUp {
		return fail("catch_up", "%d is out of range 0..%d", s.CatchUp, MaxCatchUp)
	}
	if s.Grace < 0 {
		return fail("grace", "must not be negative")
	}
	// The job must pass the gate's checks; the slot's own id is checked with it.
	j := p.Job(time.Unix(1<<31, 0))
	if err := j.Validate(s.Topic, time.Now()); err != nil {
		return fail("job", "%v", err)
	}
	if s.RunNow != "" {
		if len(s.RunNow) > maxNameLen || !validName.MatchString(s.RunNow) {
			return fail("run_now", "%q: want 1-%d letters, digits, '.', '_' or '-'", s.RunNow, maxNameLen)
		}
	}
	return p, nil
}

// GraceOrDefault is Grace, or DefaultGrace when unset.
func (p *Parsed) GraceOrDefault() time.Duration {
	if p.Grace == 0 {
		return DefaultGrace
	}
	return time.Duration(p.Grace)
}

// Next is the first slot strictly after t.
func (p *Parsed) Next(t time.Time) time.Time {
	if p.spec == nil {
		every := time.Duration(p.Every)
		ns := t.UnixNano()
		next := (ns/int64(every) + 1) * int64(every)
		return time.Unix(0, next).In(t.Location())
	}
	return p.spec.Next(t.In(p.loc))
}

// JobID is the id of slot's job: periodic:<name>:<unix seconds>.
func JobID(name string, slot time.Time) string {
	return "periodic:" + name + ":" + strconv.FormatInt(slot.Unix(), 10)
}

// RunNowID is the id of a run-now's job: periodic:<name>:now:<nonce>.
func RunNowID(name, nonce string) string { return "periodic:" + name + ":now:" + nonce }

// Job is slot's job, its id the slot's (JobID).
func (p *Parsed) Job(slot time.Time) job.Job {
	j := p.template()
	j.ID = JobID(p.Name, slot)
	return j
}

// RunNowJob is the job a run-now fires.
func (p *Parsed) RunNowJob() job.Job {
	j := p.template()
	j.ID = RunNowID(p.Name, p.RunNow)
	return j
}

func (p *Parsed) template() job.Job {
	return job.Job{
		Type: p.Type, Group: p.Group, Tenant: p.Tenant, Resource: p.Resource, Priority: p.Priority,
		Payload: p.Payload, MaxAttempts: p.MaxAttempts, Timeout: p.Timeout, Retain: p.Retain,
	}
}
