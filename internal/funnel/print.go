package funnel

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice/internal/queue"
)

// milestoneRows are the Redis-side milestones in the order jobs pass them.
var milestoneRows = []struct{ milestone, label string }{
	{queue.MilestoneRelayed, "relayed into Redis"},
	{queue.MilestoneDeduplicated, "deduplicated (already relayed)"},
	{queue.MilestoneDropped, "dropped (group cancelled)"},
	{queue.MilestoneDeadLettered, "dead-lettered at the relay"},
	{queue.MilestoneRequeued, "requeued to Kafka"},
	{queue.MilestoneDequeued, "dequeued (every attempt)"},
	{queue.MilestoneCompleted, "completed"},
	{queue.MilestoneRetried, "retried"},
	{queue.MilestoneDead, "dead"},
	{queue.MilestoneCancelled, "cancelled in Redis"},
}

// Write prints the report for people.
func Write(w io.Writer, r Report) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STAGE FUNNEL (Redis counters since its data began; the gates' since each gate started)")
	if len(r.Topics) == 0 {
		fmt.Fprintln(tw, "  no jobs counted yet")
	}
	for _, t := range r.Topics {
		fmt.Fprintf(tw, "\ntopic %s\n", t.Topic)
		if t.Gate != nil {
			fmt.Fprintf(tw, "  accepted by the gate\t%d\t(rejected %d)\n", t.Gate.Accepted+t.Gate.Failed, t.Gate.Rejected)
			fmt.Fprintf(tw, "  produced to Kafka\t%d\t(failed %d)\n", t.Gate.Accepted, t.Gate.Failed)
		}
		if t.InKafka != nil {
			fmt.Fprintf(tw, "  in Kafka, not yet relayed\t%d\t%s\n", *t.InKafka, lagText(t.KafkaLag))
		} else if t.KafkaLag != nil {
			fmt.Fprintf(tw, "  waiting in Kafka\t\t%s\n", lagText(t.KafkaLag))
		}
		for _, row := range milestoneRows {
			fmt.Fprintf(tw, "  %s\t%d\t\n", row.label, t.Milestones[row.milestone])
		}
		fmt.Fprintf(tw, "  in Redis, not ended\t%d\t(ready, delayed or in flight)\n", t.InRedis)
		for _, n := range t.Notes {
			fmt.Fprintf(tw, "  · %s\n", n)
		}
		for _, u := range t.Unexplained {
			fmt.Fprintf(tw, "  ✗ UNEXPLAINED: %s\n", u)
		}
		if len(t.Unexplained) == 0 {
			fmt.Fprintln(tw, "  ✓ every gap explained")
		}
	}
	fmt.Fprintln(tw, "\nQUEUE PARTITIONS\n  topic\tpartition\tready\tdelayed\tin flight\tdead set\topen by counters\t")
	for _, p := range r.Partitions {
		mark := ""
		if p.Open != p.Ready+p.Delayed+p.Inflight {
			mark = "✗"
		}
		fmt.Fprintf(tw, "  %s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", p.Topic, p.Partition, p.Ready, p.Delayed, p.Inflight, p.Dead, p.Open, mark)
	}
	if c := r.Canary; c != nil {
		fmt.Fprintf(tw, "\nCANARIES (monitor %s, every %s, stale after %s, last round %s)\n", orNone(c.Monitor), c.Interval, 2*c.Interval+c.Grace, ago(c.LastRound, time.Now()))
		fmt.Fprintln(tw, "  path\tage\tlatency\tlast sent\tlast completed\t")
		for _, p := range c.Paths {
			mark := "ok"
			if p.Stale {
				mark = "STALE"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\n", p.Path, p.Age.Round(time.Millisecond), p.Latency.Round(time.Millisecond), stamp(p.Sent), stamp(p.Done), mark)
		}
		for _, a := range c.Alerts {
			fmt.Fprintf(tw, "  ✗ ALERT: %s\n", a)
		}
	}
	for _, u := range r.Unread {
		fmt.Fprintf(tw, "\nnot read: %s\n", u)
	}
	if len(r.Problems) == 0 {
		fmt.Fprintln(tw, "\nOK: every gap explained, no canary late")
	} else {
		fmt.Fprintf(tw, "\n%d PROBLEM(S):\n  %s\n", len(r.Problems), strings.Join(r.Problems, "\n  "))
	}
	return tw.Flush()
}

func lagText(lag *int64) string {
	if lag == nil {
		return "(Kafka's lag not read)"
	}
	return fmt.Sprintf("(relay lag %d records)", *lag)
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.UTC().Format("15:04:05.000")
}

func ago(t, now time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return now.Sub(t).Round(time.Millisecond).String() + " ago"
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
