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
	"github.com/sluicehq/sluice/internal/limits"
)

func init() {
	cli.Describe("dlq", "Dead letters, through the admin API (docs/admin.md). --source redis (default): the dead sets,\n"+
		"jobs whose last attempt failed, of every topic's queues (newest first; --topic filters, and chooses the topic of the ids\n"+
		"named: without it they are looked for in every topic, and an id dead in two is refused). --source kafka --topic T: the relay's T.dlq, messages\n"+
		"it could not relay (oldest first). replay puts dead jobs back to ready with their attempts reset, or produces DLQ\n"+
		"records to T again (then deletes them from T.dlq); purge deletes. Kafka deletes a partition's records oldest first\n"+
		"only: name them from the oldest, or use --all.\n"+
		"  sluice dlq ls [--source redis|kafka] [--topic T] [--limit N] [--cursor C]\n"+
		"  sluice dlq show [--source ...] [--topic T] <id>\n"+
		"  sluice dlq replay|purge [--source ...] [--topic T] (<id>... | --all)")
	cli.Describe("rate", "Relay rates per topic (Consul sluice/<stage>/relay/<topic>/rate), through the admin API (docs/admin.md).\n"+
		"pause keeps the rate in force, and resume restores it.\n"+
		"  sluice rate get [<topic>]\n"+
		"  sluice rate set <topic> <jobs per second> [--burst B]  |  sluice rate set <topic> unlimited\n"+
		"  sluice rate pause <topic>  |  sluice rate resume <topic>")
	cli.Describe("limits", "Execution rate limits per resource key (Consul sluice/<stage>/limits/<resource>), through the admin API.\n"+
		"  sluice limits get [<resource>]\n"+
		"  sluice limits set <resource> <starts per second> [--burst B]\n"+
		"  sluice limits unset <resource>")
	cli.Describe("groups", "Groups, through the admin API: those with ready jobs in each queue partition's fair order, and bulk groups with\n"+
		"their progress (found by scanning Redis: an admin read, not a poll), of every topic or of --topic. show and cancel\n"+
		"find the group in every topic; a group name two topics use needs --topic.\n"+
		"  sluice groups ls [--topic T] [--limit N]  |  sluice groups show [--topic T] <group>  |  sluice groups cancel [--topic T] <group>")
	cli.Describe("scale", "Workers per partition, through the admin API. set pins a partition's workers per consumer (Consul\n"+
		"sluice/<stage>/scaling/pins/<partition>): the scaler commands the pin (reason \"pinned by operator\") instead\n"+
		"of deciding, until `set <partition> auto`.\n"+
		"  sluice scale show  |  sluice scale set <partition> <workers|auto>")
}

func runDLQ(ctx context.Context, args []string, stdout, _ io.Writer) error {
	var source, topic, cursor string
	var limit int
	var all bool
	common := func(fs *flag.FlagSet) {
		fs.StringVar(&source, "source", admin.SourceRedis, "redis (the dead set) or kafka (the relay's <topic>.dlq)")
		fs.StringVar(&topic, "topic", "", "the job topic: required for kafka; for redis, the dead sets to read (default: every topic's)")
	}
	act := func(verb string) func(ctx context.Context, c *admin.Client, args []string, out io.Writer, asJSON bool) error {
		return func(ctx context.Context, c *admin.Client, args []string, out io.Writer, asJSON bool) error {
			if all == (len(args) > 0) {
				return usageErrorf("name ids or --all (not both)")
			}
			body := admin.DLQAction{Source: source, Topic: topic, IDs: args, All: all}
			return show(ctx, c, "POST", "/api/v1/dlq/"+verb, body, out, asJSON, func(w *tabwriter.Writer, r admin.DLQResult) {
				if r.Replayed != nil {
					fmt.Fprintf(w, "replayed %d\n", *r.Replayed)
				}
				if r.Purged != nil {
					fmt.Fprintf(w, "purged %d\n", *r.Purged)
				}
				for _, s := range r.Skipped {
					fmt.Fprintf(w, "skipped %s\n", s)
				}
			})
		}
	}
	return runAdmin(ctx, "dlq", []adminCmd{
		{name: "ls", synopsis: "[--source redis|kafka] [--topic T] [--limit N] [--cursor C]",
			register: func(fs *flag.FlagSet) {
				common(fs)
				fs.IntVar(&limit, "limit", 50, "entries per page (1..1000)")
				fs.StringVar(&cursor, "cursor", "", "the next page: the cursor the last page printed")
			},
			run: func(ctx context.Context, c *admin.Client, args []string, out io.Writer, asJSON bool) error {
				if err := wantArgs(args, 0, 0, "none"); err != nil {
					return err
				}
				q := url.Values{"source": {source}, "limit": {strconv.Itoa(limit)}}
				if topic != "" {
					q.Set("topic", topic)
				}
				if cursor != "" {
					q.Set("cursor", cursor)
				}
				return show(ctx, c, "GET", "/api/v1/dlq?"+q.Encode(), nil, out, asJSON, func(w *tabwriter.Writer, l admin.DLQList) {
					if l.Source == admin.SourceKafka {
						fmt.Fprintln(w, "ID\tKEY\tREASON\tAT\tVALUE")
						for _, e := range l.Entries {
							fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", e.ID, cell(e.Key, 24), cell(e.Reason, 60), stamp(e.Timestamp), cell(e.Value, 40))
						}
					} else {
						fmt.Fprintln(w, "ID\tPART\tTOPIC\tGROUP\tTYPE\tATTEMPTS\tDIED\tLAST ERROR")
						for _, e := range l.Entries {
							fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\t%d\t%s\t%s\n", e.ID, e.Partition, cell(e.Topic, 20), cell(e.Group, 24), cell(e.Type, 16), e.Attempts, stamp(e.DeadAt), cell(e.LastError, 60))
						}
					}
					if len(l.Entries) == 0 {
						fmt.Fprintln(w, "(none)")
					}
					if l.NextCursor != "" {
						fmt.Fprintf(w, "more: --cursor %s\n", l.NextCursor)
					}
				})
			}},
		{name: "show", synopsis: "[--source redis|kafka] [--topic T] <id>", register: common,
			run: func(ctx context.Context, c *admin.Client, args []string, out io.Writer, asJSON bool) error {
				if err := wantArgs(args, 1, 1, "<id>"); err != nil {
					return err
				}
				q := url.Values{"source": {source}, "id": {args[0]}}
				if topic != "" {
					q.Set("topic", topic)
				}
				return show(ctx, c, "GET", "/api/v1/dlq/entry?"+q.Encode(), nil, out, asJSON, func(w *tabwriter.Writer, e admin.DLQEntry) {
					row := func(k, v string) {
						if v != "" {
							fmt.Fprintf(w, "%s\t%s\n", k, v)
						}
					}
					row("id", e.ID)
					row("partition", strconv.Itoa(e.Partition))
					row("topic", e.Topic)
					row("group", e.Group)
					row("type", e.Type)
					if e.DeadAt != nil {
						row("attempts", strconv.Itoa(e.Attempts))
						row("died", stamp(e.DeadAt))
					}
					row("last error", e.LastError)
					row("key", e.Key)
					row("reason", e.Reason)
					row("from", e.SourceRecord)
					if e.Timestamp != nil {
						row("at", stamp(e.Timestamp))
					}
					for k, v := range e.Headers {
						row("header "+k, v)
					}
					row("envelope", string(e.Envelope))
					row("value", e.Value)
					row("value (base64)", e.ValueBase64)
				})
			}},
		{name: "replay", synopsis: "[--source redis|kafka] [--topic T] (<id>... | --all)",
			register: func(fs *flag.FlagSet) {
				common(fs)
				fs.BoolVar(&all, "all", false, "every entry (of --topic, if given)")
			}, run: act("replay")},
		{name: "purge", synopsis: "[--source redis|kafka] [--topic T] (<id>... | --all)",
			register: func(fs *flag.FlagSet) {
				common(fs)
				fs.BoolVar(&all, "all", false, "every entry (of --topic, if given)")
			}, run: act("purge")},
	}, args, stdout)
}

func rateTable(w *tabwriter.Writer, rates []admin.RateState) {
	fmt.Fprintln(w, "TOPIC\tSTATE\tRATE/S\tBURST")
	for _, r := range rates {
		state, rate, burst := "limited", strconv.FormatFloat(r.Rate, 'g', -1, 64), strconv.Itoa(r.Burst)
		switch {
		case r.Error != "":
			state = "invalid: " + r.Error
		case r.Unlimited:
			state, rate = "unlimited", "-"
		case r.Paused:
			state = "paused"
			if !(r.Rate > 0) {
				rate = "(unlimited on resume)"
			}
		}
		if r.Burst == 0 {
			burst = "(= rate)"
		}
		if r.Unlimited {
			burst = "-"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", r.Topic, state, rate, burst)
	}
}

func runRate(ctx context.Context, args []string, stdout, _ io.Writer) error {
	var burst int
	one := func(w *tabwriter.Writer, r admin.RateState) { rateTable(w, []admin.RateState{r}) }
	topicAct := func(verb string) func(ctx context.Context, c *admin.Client, args []string, out io.Writer, asJSON bool) error {
		return func(ctx context.Context, c *admin.Client, args []string, out io.Writer, asJSON bool) error {
			if err := wantArgs(args, 1, 1, "<topic>"); err != nil {
				return err
			}
			return show(ctx, c, "POST", "/api/v1/rates/"+url.PathEscape(args[0])+"/"+verb, nil, out, asJSON, one)
		}
	}
	return runAdmin(ctx, "rate", []adminCmd{
		{name: "get", synopsis: "[<topic>]", run: func(ctx context.Context, c *admin.Client, args []string, out io.Writer, asJSON bool) error {
			if err := wantArgs(args, 0, 1, "[<topic>]"); err != nil {
				return err
			}
			if len(args) == 1 {
				return show(ctx, c, "GET", "/api/v1/rates/"+url.PathEscape(args[0]), nil, out, asJSON, one)
			}
			return show(ctx, c, "GET", "/api/v1/rates", nil, out, asJSON, func(w *tabwriter.Writer, l admin.RateList) {
				rateTable(w, l.Rates)
				if len(l.Rates) == 0 {
					fmt.Fprintln(w, "(no topic has a rate: every topic relays unlimited)")
				}
			})
		}},
		{name: "set", synopsis: "<topic> <jobs per second | unlimited> [--burst B]",
			register: func(fs *flag.FlagSet) {
				fs.IntVar(&burst, "burst", 0, "jobs that may go at once after a quiet spell (0: the rate)")
			},
			run: func(ctx context.Context, c *admin.Client, args []string, out io.Writer, asJSON bool) error {
				if err := wantArgs(args, 2, 2, "<topic> <jobs per second | unlimited>"); err != nil {
					return err
				}
				body := admin.RateSet{Burst: burst}
				if args[1] == "unlimited" {
					body = admin.RateSet{Unlimited: true}
				} else {
					v, err := strconv.ParseFloat(args[1], 64)
					if err != nil {
						return usageErrorf("rate %q: want jobs per second or unlimited", args[1])
					}
					body.Rate = v
				}
				return show(ctx, c, "PUT", "/api/v1/rates/"+url.PathEscape(args[0]), body, out, asJSON, one)
			}},
		{name: "pause", synopsis: "<topic>", run: topicAct("pause")},
		{name: "resume", synopsis: "<topic>", run: topicAct("resume")},
	}, args, stdout)
}

func limitTable(w *tabwriter.Writer, ls []admin.LimitState) {
	fmt.Fprintln(w, "RESOURCE\tRATE/S\tBURST")
	for _, l := range ls {
		if l.Error != "" {
			fmt.Fprintf(w, "%s\tinvalid: %s\t-\n", l.Resource, l.Error)
			continue
		}
		fmt.Fprintf(w, "%s\t%s\t%d\n", l.Resource, strconv.FormatFloat(l.Rate, 'g', -1, 64), limits.Limit{Burst: l.Burst}.EffectiveBurst())
	}
}

func runLimits(ctx context.Context, args []string, stdout, _ io.Writer) error {
	var burst int
	one := func(w *tabwriter.Writer, l admin.LimitState) { limitTable(w, []admin.LimitState{l}) }
	return runAdmin(ctx, "limits", []adminCmd{
		{name: "get", synopsis: "[<resource>]", run: func(ctx context.Context, c *admin.Client, args []string, out io.Writer, asJSON bool) error {
			if err := wantArgs(args, 0, 1, "[<resource>]"); err != nil {
				return err
			}
			if len(args) == 1 {
				return show(ctx, c, "GET", "/api/v1/limits/"+url.PathEscape(args[0]), nil, out, asJSON, one)
			}
			return show(ctx, c, "GET", "/api/v1/limits", nil, out, asJSON, func(w *tabwriter.Writer, l admin.LimitList) {
				limitTable(w, l.Limits)
				if len(l.Limits) == 0 {
					fmt.Fprintln(w, "(no limits: every resource runs unlimited)")
				}
			})
		}},
		{name: "set", synopsis: "<resource> <starts per second> [--burst B]",
			register: func(fs *flag.FlagSet) {
				fs.IntVar(&burst, "burst", 0, "starts that may go at once after a quiet spell (0: 1)")
			},
			run: func(ctx context.Context, c *admin.Client, args []string, out io.Writer, asJSON bool) error {
				if err := wantArgs(args, 2, 2, "<resource> <starts per second>"); err != nil {
					return err
				}
				v, err := strconv.ParseFloat(args[1], 64)
				if err != nil {
					return usageErrorf("rate %q: want starts per second", args[1])
				}
				return show(ctx, c, "PUT", "/api/v1/limits/"+url.PathEscape(args[0]), admin.LimitState{Rate: v, Burst: burst}, out, asJSON, one)
			}},
		{name: "unset", synopsis: "<resource>", run: func(ctx context.Context, c *admin.Client, args []string, out io.Writer, asJSON bool) error {
			if err := wantArgs(args, 1, 1, "<resource>"); err != nil {
				return err
			}
			return show(ctx, c, "DELETE", "/api/v1/limits/"+url.PathEscape(args[0]), nil, out, asJSON, func(w *tabwriter.Writer, _ map[string]any) {
				fmt.Fprintf(w, "%s: unlimited\n", args[0])
			})
		}},
	}, args, stdout)
}

func progress(g admin.GroupInfo) string {
	if g.Progress == nil {
		return "-"
	}
	const width = 20
	n := int(*g.Progress*width + 0.5)
	return "[" + strings.Repeat("#", n) + strings.Repeat(".", width-n) + "] " + strconv.FormatFloat(*g.Progress*100, 'f', 1, 64) + "%"
}

func runGroups(ctx context.Context, args []string, stdout, _ io.Writer) error {
	var limit int
	var topic string
	topicFlag := func(fs *flag.FlagSet) {
		fs.StringVar(&topic, "topic", "", "the group's topic (default: every topic; needed when two topics have a group of that name)")
	}
	// path is the API path of a group, with ?topic= when one is named.
	path := func(group, suffix string) string {
		p := "/api/v1/groups/" + url.PathEscape(group) + suffix
		if topic != "" {
			p += "?" + url.Values{"topic": {topic}}.Encode()
		}
		return p
	}
	return runAdmin(ctx, "groups", []adminCmd{
		{name: "ls", synopsis: "[--topic T] [--limit N]",
			register: func(fs *flag.FlagSet) {
				fs.IntVar(&limit, "limit", 100, "active groups per queue partition, and bulk groups in all (1..1000)")
				fs.StringVar(&topic, "topic", "", "only this topic's groups (default: every topic's)")
			},
			run: func(ctx context.Context, c *admin.Client, args []string, out io.Writer, asJSON bool) error {
				if err := wantArgs(args, 0, 0, "none"); err != nil {
					return err
				}
				q := url.Values{"limit": {strconv.Itoa(limit)}}
				if topic != "" {
					q.Set("topic", topic)
				}
				return show(ctx, c, "GET", "/api/v1/groups?"+q.Encode(), nil, out, asJSON, func(w *tabwriter.Writer, l admin.GroupList) {
					fmt.Fprintln(w, "ACTIVE GROUPS (fair order per queue partition)")
					fmt.Fprintln(w, "TOPIC\tPART\tGROUP\tREADY")
					for _, g := range l.Active {
						group := g.Group
						if group == "" {
							group = "(" + g.Lane + ")" // a shared lane of jobs without a group
						}
						fmt.Fprintf(w, "%s\t%d\t%s\t%d\n", cell(g.Topic, 20), g.Partition, cell(group, 40), g.Ready)
					}
					if len(l.Active) == 0 {
						fmt.Fprintln(w, "(none)")
					}
					fmt.Fprintln(w, "\nBULK GROUPS")
					fmt.Fprintln(w, "TOPIC\tPART\tGROUP\tPROGRESS\tDONE/TOTAL\tDEAD\tCANCELLED\tCALLBACK")
					for _, g := range l.Bulk {
						fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%d/%d\t%d\t%d\t%s\n", cell(g.Topic, 20), g.Partition, cell(g.Group, 40), progress(g), g.Done, g.Total, g.Dead, g.Cancelled, cell(g.CallbackState, 12))
					}
					if len(l.Bulk) == 0 {
						fmt.Fprintln(w, "(none)")
					}
				})
			}},
		{name: "show", synopsis: "[--topic T] <group>", register: topicFlag, run: func(ctx context.Context, c *admin.Client, args []string, out io.Writer, asJSON bool) error {
			if err := wantArgs(args, 1, 1, "<group>"); err != nil {
				return err
			}
			return show(ctx, c, "GET", path(args[0], ""), nil, out, asJSON, func(w *tabwriter.Writer, g admin.GroupInfo) {
				fmt.Fprintf(w, "group\t%s\npartition\t%d\ntopic\t%s\n", g.Group, g.Partition, cell(g.Topic, 80))
				if g.Total > 0 {
					fmt.Fprintf(w, "progress\t%s\ntotal\t%d\n", progress(g), g.Total)
				}
				fmt.Fprintf(w, "relayed\t%d\nqueued\t%d\nrunning\t%d\ndone\t%d\nfailed attempts\t%d\ndead\t%d\ncancelled\t%d\n",
					g.Relayed, g.Queued, g.Running, g.Done, g.Failed, g.Dead, g.Cancelled)
				fmt.Fprintf(w, "first job\t%s\nclosed\t%s\ncancelled at\t%s\ncompleted\t%s\n", stamp(g.FirstAt), stamp(g.ClosedAt), stamp(g.CancelledAt), stamp(g.CompletedAt))
				if g.CallbackURL != "" {
					fmt.Fprintf(w, "callback\t%s %s (%d attempts) %s\n", g.CallbackURL, cell(g.CallbackState, 20), g.CallbackAttempts, g.CallbackError)
				}
			})
		}},
		{name: "cancel", synopsis: "[--topic T] <group>", register: topicFlag, run: func(ctx context.Context, c *admin.Client, args []string, out io.Writer, asJSON bool) error {
			if err := wantArgs(args, 1, 1, "<group>"); err != nil {
				return err
			}
			return show(ctx, c, "POST", path(args[0], "/cancel"), nil, out, asJSON, func(w *tabwriter.Writer, r admin.CancelResult) {
				fmt.Fprintf(w, "group %s cancelled: %d ready jobs removed; delayed ones go when due, running ones finish\n", r.Group, r.Removed)
			})
		}},
	}, args, stdout)
}

func optInt(p *int) string {
	if p == nil {
		return "-"
	}
	return strconv.Itoa(*p)
}

func scaleRow(w *tabwriter.Writer, p admin.ScalePartition) {
	pin := "auto"
	if p.Pin != nil {
		pin = fmt.Sprintf("pinned %d (%s)", p.Pin.Workers, stamp(&p.Pin.At))
	}
	fmt.Fprintf(w, "%d\t%d\t%d\t%d\t%s\t%s\n", p.Partition, p.Workers, p.Consumers, p.Checkpoint, optInt(p.Target), pin)
}

const scaleHeader = "PART\tWORKERS\tCONSUMERS\tCHECKPOINT\tTARGET\tPIN"

func runScale(ctx context.Context, args []string, stdout, _ io.Writer) error {
	return runAdmin(ctx, "scale", []adminCmd{
		{name: "show", synopsis: "", run: func(ctx context.Context, c *admin.Client, args []string, out io.Writer, asJSON bool) error {
			if err := wantArgs(args, 0, 0, "none"); err != nil {
				return err
			}
			return show(ctx, c, "GET", "/api/v1/scale", nil, out, asJSON, func(w *tabwriter.Writer, l admin.ScaleList) {
				p := l.Params
				fmt.Fprintf(w, "parameters: threshold %g, %d cycles, base %d, max %d, half-life %gs, paused %v\n", p.Threshold, p.Cycles, p.Base, p.Max, p.HalfLife, p.Paused)
				if l.ParamsFrom == admin.ParamsFromConsul {
					fmt.Fprintln(w, "(a console alone: the parameters in Consul over the defaults; a coordinator started with other --scale-* flags uses those)")
				}
				if !l.Holder {
					fmt.Fprintln(w, "(no coordinator that holds the lock answered: the scaler's targets are known to the lock holder's console only)")
				}
				fmt.Fprintln(w, scaleHeader)
				for _, sp := range l.Partitions {
					scaleRow(w, sp)
				}
			})
		}},
		{name: "set", synopsis: "<partition> <workers | auto>", run: func(ctx context.Context, c *admin.Client, args []string, out io.Writer, asJSON bool) error {
			if err := wantArgs(args, 2, 2, "<partition> <workers | auto>"); err != nil {
				return err
			}
			body := admin.ScaleSet{Auto: args[1] == "auto"}
			if !body.Auto {
				n, err := strconv.Atoi(args[1])
				if err != nil {
					return usageErrorf("workers %q: want a count or auto", args[1])
				}
				body.Workers = n
			}
			return show(ctx, c, "PUT", "/api/v1/scale/"+url.PathEscape(args[0]), body, out, asJSON, func(w *tabwriter.Writer, sp admin.ScalePartition) {
				fmt.Fprintln(w, scaleHeader)
				scaleRow(w, sp)
			})
		}},
	}, args, stdout)
}

// runCanaryStatus is `sluice canary status`: the canaries as the admin API
// reads them from Redis.
func runCanaryStatus(ctx context.Context, args []string, stdout, _ io.Writer) error {
	return runAdmin(ctx, "canary", []adminCmd{
		{name: "status", synopsis: "", run: func(ctx context.Context, c *admin.Client, args []string, out io.Writer, asJSON bool) error {
			if err := wantArgs(args, 0, 0, "none"); err != nil {
				return err
			}
			alerting := false
			err := show(ctx, c, "GET", "/api/v1/canary", nil, out, asJSON, func(w *tabwriter.Writer, s admin.CanaryState) {
				alerting = len(s.Alerts) > 0
				if !s.Monitor {
					fmt.Fprintln(w, "no canary monitor has run on this stage (sluice coordinator --canary-topics, or sluice canary)")
				} else {
					fmt.Fprintf(w, "monitor %s, every %gs, stale after %gs, last round %s\n", s.Holder, s.Interval, 2*s.Interval+s.Grace, stamp(s.LastRound))
				}
				if len(s.Paths) > 0 {
					fmt.Fprintln(w, "PATH\tAGE\tLATENCY\tLAST SENT\tLAST DONE\tSTATE")
					for _, p := range s.Paths {
						state := "ok"
						if p.Stale {
							state = "STALE"
						}
						fmt.Fprintf(w, "%s/k%d→r%d\t%.1fs\t%.0fms\t%s\t%s\t%s\n", p.Topic, p.KafkaPartition, p.RedisPartition, p.Age, p.Latency*1000, stamp(p.Sent), stamp(p.Done), state)
					}
				}
				for _, a := range s.Alerts {
					fmt.Fprintf(w, "✗ ALERT: %s\n", a)
				}
				if s.Monitor && len(s.Alerts) == 0 {
					fmt.Fprintln(w, "✓ every path is fresh")
				}
			})
			if err == nil && alerting {
				return errReported // exit 1, as sluice stats, for scripts and cron
			}
			return err
		}},
	}, args, stdout)
}
