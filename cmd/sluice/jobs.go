package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/sluicehq/sluice/internal/admin"
	"github.com/sluicehq/sluice/internal/queue"
)

// runJobs is `sluice jobs ls` (a topic's jobs across its partitions, by
// state, paged: GET /api/v1/jobs), `sluice jobs show` (where a job is, GET
// /api/v1/topics/{topic}/jobs/{id}, docs/gate.md) and `sluice jobs
// cancel|delete` (one job, docs/admin.md#cancel-and-delete-a-job), through
// the admin API.
func runJobs(ctx context.Context, args []string, stdout, _ io.Writer) error {
	var group, topic, state, cursor string
	var all bool
	partition, offset, limit := -1, int64(-1), 100
	change := func(verb string) adminCmd {
		return adminCmd{name: verb, synopsis: "[--group G] <topic> <id>",
			register: func(fs *flag.FlagSet) {
				fs.StringVar(&group, "group", "", "the job's group, which places it (default: none, as for a job without a group)")
			},
			run: func(ctx context.Context, c *admin.Client, args []string, out io.Writer, asJSON bool) error {
				if err := wantArgs(args, 2, 2, "<topic> <id>"); err != nil {
					return err
				}
				path := "/api/v1/topics/" + url.PathEscape(args[0]) + "/jobs/" + url.PathEscape(args[1])
				method := "DELETE"
				if verb == "cancel" {
					method, path = "POST", path+"/cancel"
				}
				if group != "" {
					path += "?" + url.Values{"group": {group}}.Encode()
				}
				return show(ctx, c, method, path, nil, out, asJSON, func(w *tabwriter.Writer, v queue.JobChange) {
					fmt.Fprintf(w, "job\t%s\ntopic\t%s\nredis partition\t%d\nwas\t%s\noutcome\t%s\nnote\t%s\n", v.ID, v.Topic, v.RedisPartition, v.Was, v.Outcome, v.Note)
				})
			}}
	}
	return runAdmin(ctx, "jobs", []adminCmd{
		{name: "ls", synopsis: "[--topic T] [--state S] [--partition P] [--limit N] [--cursor C | --all]",
			register: func(fs *flag.FlagSet) {
				fs.StringVar(&topic, "topic", "jobs", "the queue's topic")
				fs.StringVar(&state, "state", "", "only jobs in this state: "+strings.Join(queue.ListStates, ", ")+" (default: every state, in that order)")
				fs.IntVar(&partition, "partition", -1, "only this Redis partition (default: every partition)")
				fs.IntVar(&limit, "limit", 100, "most jobs on a page (1..1000)")
				fs.StringVar(&cursor, "cursor", "", "the page after the one whose next cursor this is")
				fs.BoolVar(&all, "all", false, "follow the cursors to the end: every page")
			},
			run: func(ctx context.Context, c *admin.Client, args []string, out io.Writer, asJSON bool) error {
				if err := wantArgs(args, 0, 0, "none"); err != nil {
					return err
				}
				// Checked here, not by the API: a usage error exits 2.
				switch {
				case state != "" && state != "all" && !slices.Contains(queue.ListStates, state):
					return usageErrorf("--state %q: want one of %s", state, strings.Join(queue.ListStates, ", "))
				case limit < 1 || limit > 1000:
					return usageErrorf("--limit %d: want 1..1000", limit)
				case all && cursor != "":
					return usageErrorf("--all starts at the first page: give it or --cursor, not both")
				case queue.ValidTopic(topic) != nil:
					return usageErrorf("--topic: %v", queue.ValidTopic(topic))
				}
				q := url.Values{"topic": {topic}, "limit": {strconv.Itoa(limit)}}
				if state != "" {
					q.Set("state", state)
				}
				if partition >= 0 {
					q.Set("partition", strconv.Itoa(partition))
				}
				first := true
				for {
					if cursor != "" {
						q.Set("cursor", cursor)
					}
					var next string
					err := show(ctx, c, "GET", "/api/v1/jobs?"+q.Encode(), nil, out, asJSON, func(w *tabwriter.Writer, p queue.JobPage) {
						if first {
							fmt.Fprintf(w, "STATE\tPARTITION\tID\tATTEMPTS\tUNTIL\tDETAIL\n")
						}
						for _, j := range p.Jobs {
							until := ""
							if !j.Until.IsZero() {
								until = j.Until.Format("2006-01-02 15:04:05.000")
							}
							detail := j.Why
							switch j.State {
							case queue.WhereRunning:
								detail = "worker " + j.Worker + ", batch " + j.Batch
							case queue.WhereDead:
								detail = j.LastError
							}
							fmt.Fprintf(w, "%s\t%d\t%s\t%d\t%s\t%s\n", j.State, j.Partition, cell(j.ID, 40), j.Attempts, until, cell(detail, 60))
						}
						if first && len(p.Jobs) == 0 && p.NextCursor == "" {
							fmt.Fprintln(w, "(none)")
						}
						next = p.NextCursor
						if next != "" && !all {
							fmt.Fprintf(w, "\nmore: --cursor %s\n", next)
						}
					})
					if err != nil || !all || asJSON || next == "" {
						return err
					}
					first, cursor = false, next
				}
			}},
		change("cancel"),
		change("delete"),
		{name: "show", synopsis: "[--group G] [--partition P --offset O] <topic> <id>",
			register: func(fs *flag.FlagSet) {
				fs.StringVar(&group, "group", "", "the job's group, which places it (default: none, as for a job without a group)")
				fs.IntVar(&partition, "partition", -1, "the job's Kafka partition, as the gate answered (with --offset: tells a job still in Kafka from one done)")
				fs.Int64Var(&offset, "offset", -1, "the job's Kafka offset, as the gate answered")
			},
			run: func(ctx context.Context, c *admin.Client, args []string, out io.Writer, asJSON bool) error {
				if err := wantArgs(args, 2, 2, "<topic> <id>"); err != nil {
					return err
				}
				q := url.Values{}
				if group != "" {
					q.Set("group", group)
				}
				if partition >= 0 || offset >= 0 {
					q.Set("partition", strconv.Itoa(partition))
					q.Set("offset", strconv.FormatInt(offset, 10))
				}
				path := "/api/v1/topics/" + url.PathEscape(args[0]) + "/jobs/" + url.PathEscape(args[1])
				if len(q) > 0 {
					path += "?" + q.Encode()
				}
				return show(ctx, c, "GET", path, nil, out, asJSON, func(w *tabwriter.Writer, v queue.JobView) {
					fmt.Fprintf(w, "job\t%s\ntopic\t%s\nredis partition\t%d\nstate\t%s\n", v.ID, v.Topic, v.RedisPartition, v.State)
					if v.Attempts > 0 {
						fmt.Fprintf(w, "attempts\t%d\n", v.Attempts)
					}
					for _, f := range [][2]string{{"why", v.Why}, {"worker", v.Worker}, {"batch", v.Batch}, {"last error", v.LastError}, {"result", v.Result}} {
						if f[1] != "" {
							fmt.Fprintf(w, "%s\t%s\n", f[0], cell(f[1], 200))
						}
					}
					if v.Since != nil {
						fmt.Fprintf(w, "since\t%s\n", v.Since.Format("2006-01-02 15:04:05.000 MST"))
					}
					if v.Until != nil {
						fmt.Fprintf(w, "until\t%s\n", v.Until.Format("2006-01-02 15:04:05.000 MST"))
					}
					fmt.Fprintf(w, "note\t%s\n", v.Note)
				})
			}},
	}, args, stdout)
}
