package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice/internal/admin"
	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/periodic"
)

// sluice periodic: the periodic schedules (docs/periodic.md), through the
// admin API.

const periodicHeader = "NAME\tWHEN\tTOPIC\tTYPE\tNEXT\tLAST FIRE\tLAST JOB\tSTATE"

func periodicRow(w *tabwriter.Writer, p admin.PeriodicState) {
	if p.Schedule == nil {
		fmt.Fprintf(w, "%s\tinvalid: %s\t-\t-\t-\t-\t-\t-\n", p.Name, p.Error)
		return
	}
	s := p.Schedule
	when := s.Cron
	if when == "" {
		when = "every " + time.Duration(s.Every).String()
	}
	if s.Timezone != "" {
		when += " (" + s.Timezone + ")"
	}
	next := "-"
	if s.Paused {
		next = "paused"
	} else if len(p.Next) > 0 {
		next = p.Next[0].Format(time.RFC3339)
	}
	last, lastJob, state := "-", "-", "-"
	if st := p.State; st != nil && !st.LastFire.IsZero() {
		last, lastJob = st.LastFire.UTC().Format(time.RFC3339), st.LastJob
		if st.LastError != "" {
			state = "post failed: " + st.LastError
		}
	}
	if p.LastJob != nil && state == "-" {
		state = p.LastJob.State
	}
	fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Name, when, s.Topic, s.Type, next, last, lastJob, state)
}

// periodicSetFlags are sluice periodic set's: the schedule's fields, or
// its whole JSON.
type periodicSetFlags struct {
	s                      periodic.Schedule
	every, timeout, retain time.Duration
	grace                  time.Duration
	payload, fromJSON      string
}

func (f *periodicSetFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.s.Cron, "cron", "", "cron expression, seconds optional first (\"0 30 9 * * MON-FRI\", \"*/15 * * * *\", \"@daily\")")
	cli.DurationVar(fs, &f.every, "every", 0, "fire at every multiple of this since the Unix epoch instead of --cron (at least 1s)")
	fs.StringVar(&f.s.Timezone, "timezone", "", "IANA time zone --cron is read in (default UTC)")
	fs.StringVar(&f.s.Topic, "topic", "", "topic the jobs are posted to (required)")
	fs.StringVar(&f.s.Type, "type", "", "the jobs' type (required)")
	fs.StringVar(&f.s.Group, "group", "", "the jobs' group")
	fs.StringVar(&f.s.Tenant, "tenant", "", "the jobs' tenant")
	fs.StringVar(&f.s.Resource, "resource", "", "the jobs' resource (execution rate limits)")
	fs.IntVar(&f.s.Priority, "priority", 0, "the jobs' priority class")
	fs.StringVar(&f.payload, "payload", "", "the jobs' payload, JSON; @file reads it from a file")
	fs.IntVar(&f.s.MaxAttempts, "max-attempts", 0, "the jobs' attempts (0: the worker's default)")
	cli.DurationVar(fs, &f.timeout, "job-timeout", 0, "one attempt's time limit (0: the worker's default)")
	cli.DurationVar(fs, &f.retain, "retain", 0, "keep each job's record and result this long after it ends")
	fs.IntVar(&f.s.CatchUp, "catch-up", 0, "after an outage, fire at most this many missed slots, the latest (0: skip them)")
	cli.DurationVar(fs, &f.grace, "grace", 0, "how late a slot still fires as on time (0: 1m)")
	fs.BoolVar(&f.s.Paused, "paused", false, "create it paused")
	fs.StringVar(&f.fromJSON, "json", "", "the whole schedule as JSON instead of the flags above; @file reads a file")
}

func readArg(v string) ([]byte, error) {
	if name, ok := strings.CutPrefix(v, "@"); ok {
		return os.ReadFile(name)
	}
	return []byte(v), nil
}

// schedule builds the schedule the flags give.
func (f *periodicSetFlags) schedule() (periodic.Schedule, error) {
	if f.fromJSON != "" {
		b, err := readArg(f.fromJSON)
		if err != nil {
			return periodic.Schedule{}, fmt.Errorf("--json: %w", err)
		}
		var s periodic.Schedule
		dec := json.NewDecoder(strings.NewReader(string(b)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&s); err != nil {
			return s, fmt.Errorf("--json: %v", err)
		}
		return s, nil
	}
	s := f.s
	s.Every, s.Timeout, s.Retain, s.Grace = job.Duration(f.every), job.Duration(f.timeout), job.Duration(f.retain), job.Duration(f.grace)
	if f.payload != "" {
		b, err := readArg(f.payload)
		if err != nil {
			return s, fmt.Errorf("--payload: %w", err)
		}
		if !json.Valid(b) {
			return s, fmt.Errorf("--payload: not valid JSON")
		}
		s.Payload = b
	}
	return s, nil
}

func runPeriodic(ctx context.Context, args []string, stdout, _ io.Writer) error {
	var set periodicSetFlags
	one := func(w *tabwriter.Writer, p admin.PeriodicState) {
		fmt.Fprintln(w, periodicHeader)
		periodicRow(w, p)
		for _, t := range p.Next {
			fmt.Fprintf(w, "next\t%s\n", t.Format(time.RFC3339))
		}
		if p.LastJob != nil {
			fmt.Fprintf(w, "last job\t%s: %s (attempts %d)\n", p.LastJob.ID, p.LastJob.State, p.LastJob.Attempts)
		}
	}
	path := func(name string, verb ...string) string {
		return "/api/v1/periodic/" + url.PathEscape(name) + strings.Join(append([]string{""}, verb...), "/")
	}
	act := func(verb string) func(ctx context.Context, c *admin.Client, args []string, out io.Writer, asJSON bool) error {
		return func(ctx context.Context, c *admin.Client, args []string, out io.Writer, asJSON bool) error {
			if err := wantArgs(args, 1, 1, "<name>"); err != nil {
				return err
			}
			return show(ctx, c, "POST", path(args[0], verb), nil, out, asJSON, one)
		}
	}
	return runAdmin(ctx, "periodic", []adminCmd{
		{name: "ls", synopsis: "", run: func(ctx context.Context, c *admin.Client, args []string, out io.Writer, asJSON bool) error {
			if err := wantArgs(args, 0, 0, "none"); err != nil {
				return err
			}
			return show(ctx, c, "GET", "/api/v1/periodic", nil, out, asJSON, func(w *tabwriter.Writer, l admin.PeriodicList) {
				fmt.Fprintln(w, periodicHeader)
				for _, p := range l.Schedules {
					periodicRow(w, p)
				}
				if len(l.Schedules) == 0 {
					fmt.Fprintln(w, "(no periodic schedule: sluice periodic set <name> --every 1h --topic T --type X)")
				}
			})
		}},
		{name: "show", synopsis: "<name>", run: func(ctx context.Context, c *admin.Client, args []string, out io.Writer, asJSON bool) error {
			if err := wantArgs(args, 1, 1, "<name>"); err != nil {
				return err
			}
			return show(ctx, c, "GET", path(args[0]), nil, out, asJSON, one)
		}},
		{name: "set", synopsis: "<name> (--cron C [--timezone Z] | --every D) --topic T --type X [--payload JSON] [--catch-up N] ... | <name> --json JSON",
			register: set.register,
			run: func(ctx context.Context, c *admin.Client, args []string, out io.Writer, asJSON bool) error {
				if err := wantArgs(args, 1, 1, "<name>"); err != nil {
					return err
				}
				s, err := set.schedule()
				if err != nil {
					return err
				}
				return show(ctx, c, "PUT", path(args[0]), s, out, asJSON, one)
			}},
		{name: "delete", synopsis: "<name>", run: func(ctx context.Context, c *admin.Client, args []string, out io.Writer, asJSON bool) error {
			if err := wantArgs(args, 1, 1, "<name>"); err != nil {
				return err
			}
			return show(ctx, c, "DELETE", path(args[0]), nil, out, asJSON, func(w *tabwriter.Writer, p admin.PeriodicState) {
				fmt.Fprintf(w, "deleted %s\n", p.Name)
			})
		}},
		{name: "pause", synopsis: "<name>", run: act("pause")},
		{name: "resume", synopsis: "<name>", run: act("resume")},
		{name: "run-now", synopsis: "<name>", run: act("run-now")},
	}, args, stdout)
}
