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

// runJobs is `sluice jobs show`: where a job is, through the admin API
// (GET /api/v1/topics/{topic}/jobs/{id}, docs/gate.md).
func runJobs(ctx context.Context, args []string, stdout, _ io.Writer) error {
	var group string
	partition, offset := -1, int64(-1)
	return runAdmin(ctx, "jobs", []adminCmd{
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
					for _, f := range [][2]string{{"why", v.Why}, {"batch", v.Batch}, {"last error", v.LastError}, {"result", v.Result}} {
						if f[1] != "" {
							fmt.Fprintf(w, "%s\t%s\n", f[0], cell(f[1], 200))
						}
					}
					if v.Until != nil {
						fmt.Fprintf(w, "until\t%s\n", v.Until.Format("2006-01-02 15:04:05.000 MST"))
					}
					fmt.Fprintf(w, "note\t%s\n", v.Note)
				})
			}},
	}, args, stdout)
}
