package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/sluicehq/sluice/internal/admin"
	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/topics"
)

func init() {
	cli.Describe("topics", "Topics (queues), through the admin API (docs/topics.md). create makes the Kafka topic with its .retry and\n"+
		".dlq and lists it in Consul (sluice/<stage>/topics/<name>): relays that follow the list (the default) serve it\n"+
		"within a second, without a restart. delete refuses a topic that still holds jobs unless --force.\n"+
		"  sluice topics create <name> [--partitions N] [--replication R]\n"+
		"  sluice topics ls  |  sluice topics describe <name>  |  sluice topics delete <name> [--force]")
}

func runTopics(ctx context.Context, args []string, stdout, _ io.Writer) error {
	var partitions, replication int
	var force bool
	name := func(args []string) (string, error) {
		if err := wantArgs(args, 1, 1, "<name>"); err != nil {
			return "", err
		}
		return url.PathEscape(args[0]), nil
	}
	return runAdmin(ctx, "topics", []adminCmd{
		{name: "create", synopsis: "<name> [--partitions N] [--replication R]",
			register: func(fs *flag.FlagSet) {
				fs.IntVar(&partitions, "partitions", topics.DefaultPartitions, "Kafka partitions of the topic and its .retry (its .dlq has one); any count fits the Redis partitions")
				fs.IntVar(&replication, "replication", 0, fmt.Sprintf("copies of each partition (0: min(%d, the brokers))", topics.DefaultReplication))
			},
			run: func(ctx context.Context, c *admin.Client, args []string, out io.Writer, asJSON bool) error {
				if err := wantArgs(args, 1, 1, "<name>"); err != nil {
					return err
				}
				body := admin.TopicCreate{Name: args[0], Partitions: partitions, Replication: replication}
				return show(ctx, c, "POST", "/api/v1/topics", body, out, asJSON, func(w *tabwriter.Writer, t admin.TopicCreated) {
					if len(t.CreatedKafka) > 0 {
						fmt.Fprintf(w, "created\t%s in Kafka\n", strings.Join(t.CreatedKafka, ", "))
					}
					topicRows(w, t.TopicState)
					fmt.Fprintf(w, "\nPOST jobs to /v1/topics/%s/jobs; relays that follow the topic list take it up within a second.\n", t.Name)
				})
			}},
		{name: "ls", run: func(ctx context.Context, c *admin.Client, args []string, out io.Writer, asJSON bool) error {
			if err := wantArgs(args, 0, 0, "none"); err != nil {
				return err
			}
			return show(ctx, c, "GET", "/api/v1/topics", nil, out, asJSON, func(w *tabwriter.Writer, l admin.TopicList) {
				fmt.Fprintln(w, "TOPIC\tPARTITIONS\tREPLICATION\tLISTED\tRELAY\tPROBLEMS")
				for _, t := range l.Topics {
					fmt.Fprintf(w, "%s\t%d\t%d\t%s\t%s\t%d\n", t.Name, t.Partitions, t.Replication, yesNo(t.Listed), orDash(t.Relay), len(t.Problems))
				}
				if len(l.Topics) == 0 {
					fmt.Fprintln(w, "(none: `sluice topics create <name>` creates one)")
				}
			})
		}},
		{name: "describe", synopsis: "<name>", run: func(ctx context.Context, c *admin.Client, args []string, out io.Writer, asJSON bool) error {
			n, err := name(args)
			if err != nil {
				return err
			}
			return show(ctx, c, "GET", "/api/v1/topics/"+n, nil, out, asJSON, func(w *tabwriter.Writer, t admin.TopicState) {
				topicRows(w, t)
			})
		}},
		{name: "delete", synopsis: "<name> [--force]",
			register: func(fs *flag.FlagSet) {
				fs.BoolVar(&force, "force", false, "delete although jobs wait in Kafka (lost) or in Redis (left to workers that serve the topic), or a relay names it in --topics")
			},
			run: func(ctx context.Context, c *admin.Client, args []string, out io.Writer, asJSON bool) error {
				n, err := name(args)
				if err != nil {
					return err
				}
				path := "/api/v1/topics/" + n
				if force {
					path += "?force=true"
				}
				return show(ctx, c, "DELETE", path, nil, out, asJSON, func(w *tabwriter.Writer, d admin.TopicDeleted) {
					fmt.Fprintf(w, "deleted\t%s\n", d.Name)
					fmt.Fprintf(w, "kafka\t%s\n", orDash(strings.Join(d.DeletedKafka, ", ")))
					fmt.Fprintf(w, "unlisted\t%s\n", yesNo(d.Unlisted))
					if d.Left > 0 {
						fmt.Fprintf(w, "left in Redis\t%d jobs (ready, delayed, running or dead): kept for workers that serve the topic; `sluice dlq purge --topic %s --all` clears its dead\n", d.Left, d.Name)
					}
				})
			}},
	}, args, stdout)
}

// topicRows prints one topic, a row per field.
func topicRows(w *tabwriter.Writer, t admin.TopicState) {
	fmt.Fprintf(w, "topic\t%s\n", t.Name)
	fmt.Fprintf(w, "partitions\t%d\n", t.Partitions)
	fmt.Fprintf(w, "replication\t%d\n", t.Replication)
	fmt.Fprintf(w, "kafka\t%s\n", orDash(strings.Join(t.Kafka, ", ")))
	fmt.Fprintf(w, "listed\t%s\n", yesNo(t.Listed))
	fmt.Fprintf(w, "registered\t%s\n", yesNo(t.Registered))
	fmt.Fprintf(w, "relay\t%s\n", orDash(t.Relay))
	if t.Created != nil {
		fmt.Fprintf(w, "created\t%s\n", stamp(t.Created))
	}
	if q := t.Queue; q != nil {
		fmt.Fprintf(w, "queue\tready %d, delayed %d, running %d, dead %d, completed %d\n", q.Ready, q.Delayed, q.Inflight, q.Dead, q.Completed)
	}
	for _, p := range t.Problems {
		fmt.Fprintf(w, "problem\t%s\n", p)
	}
}

func yesNo(b bool) string { return strconv.FormatBool(b) }

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
