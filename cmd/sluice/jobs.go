package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"text/tabwriter"

	"github.com/sluicehq/sluice/internal/admin"
	"github.com/sluicehq/sluice/internal/queue"
)

// runJobs is `sluice jobs ls` (a queue partition's running and delayed
// jobs, GET /api/v1/jobs) and `sluice jobs show` (where a job is, GET
// /api/v1/topics/{topic}/jobs/{id}, docs/gate.md), through the admin API.
func runJobs(ctx context.Context, args []string, stdout, _ io.Writer) error {
	var group, topic string
	partition, offset, limit := -1, int64(-1), 100
	return runAdmin(ctx, "jobs", []adminCmd{
		{name: "ls", synopsis: "--topic T --partition P [--limit N]",
			register: func(fs *flag.FlagSet) {
				fs.StringVar(&topic, "topic", "jobs", "the queue's topic")
				fs.IntVar(&partition, "partition", -1, "the queue's Redis partition (required)")
				fs.IntVar(&limit, "limit", 100, "most running and most delayed jobs listed (1..1000)")
			},
			run: func(ctx context.Context, c *admin.Client, args []string, out io.Writer, asJSON bool) error {
				if err := wantArgs(args, 0, 0, "none"); err != nil {
					return err
				}
				if partition < 0 {
					return usageErrorf("--partition is required: the queue partition to list, 0 up to the pool's --redis-partitions minus 1 (sluice stats shows them)")
				}
				q := url.Values{"topic": {topic}, "partition": {strconv.Itoa(partition)}, "limit": {strconv.Itoa(limit)}}
				return show(ctx, c, "GET", "/api/v1/jobs?"+q.Encode(), nil, out, asJSON, func(w *tabwriter.Writer, l queue.JobList) {
					fmt.Fprintf(w, "RUNNING (%s, partition %d)\nID\tLANE\tATTEMPT\tWORKER\tSINCE\tLEASE UNTIL\n", l.Topic, l.Partition)
					for _, j := range l.Running {
						fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\t%s\n", cell(j.ID, 40), cell(j.Lane, 40), j.Attempts, cell(j.Worker, 40), j.Since.Format("15:04:05.000"), j.Until.Format("15:04:05.000"))
					}
					if len(l.Running) == 0 {
						fmt.Fprintln(w, "(none)")
					}
					fmt.Fprintf(w, "\nDELAYED\nID\tLANE\tATTEMPTS\tUNTIL\tWHY\n")
					for _, j := range l.Delayed {
						fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\n", cell(j.ID, 40), cell(j.Lane, 40), j.Attempts, j.Until.Format("2006-01-02 15:04:05.000"), j.Why)
					}
					if len(l.Delayed) == 0 {
						fmt.Fprintln(w, "(none)")
					}
				})
			}},
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
