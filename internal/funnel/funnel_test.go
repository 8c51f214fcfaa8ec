package funnel

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/canary"
	"github.com/sluicehq/sluice/internal/queue"
)

func part(p int, milestones map[string]int64, ready, delayed, inflight int64) queue.PartitionFunnel {
	return queue.PartitionFunnel{Queue: queue.Queue{Topic: "jobs", Part: p}, Milestones: map[string]map[string]int64{"jobs": milestones}, Canaries: map[string]map[string]int64{},
		Ready: ready, Delayed: delayed, Inflight: inflight}
}

func gate(accepted, failed float64) map[string]map[string]float64 {
	return map[string]map[string]float64{"jobs": {"accepted": accepted, "failed": failed, "rejected": 2}}
}

func TestBuildExplainsGapsAndFlagsTheRest(t *testing.T) {
	balanced := map[string]int64{queue.MilestoneRelayed: 90, queue.MilestoneDeduplicated: 5, queue.MilestoneDeadLettered: 5, queue.MilestoneCompleted: 80, queue.MilestoneDead: 4, queue.MilestoneCancelled: 1}
	for _, c := range []struct {
		name       string
		in         Input
		problems   []string
		inKafka    int64
		notes      []string
		unexplains bool
	}{
		{
			name:    "balanced, with jobs in Redis and in Kafka",
			in:      Input{Partitions: []queue.PartitionFunnel{part(0, balanced, 2, 2, 1)}, Gate: gate(110, 3), KafkaLag: map[string]int64{"jobs": 12}},
			inKafka: 10,
			notes:   []string{"3 valid jobs were not produced", "10 produced jobs not relayed yet: in Kafka", "5 relayed jobs have not ended"},
		},
		{
			name:     "jobs lost between Kafka and Redis",
			in:       Input{Partitions: []queue.PartitionFunnel{part(0, balanced, 2, 2, 1)}, Gate: gate(130, 0), KafkaLag: map[string]int64{"jobs": 12}},
			inKafka:  30,
			problems: []string{"topic jobs: 18 jobs were produced but neither relayed nor in Kafka's lag (12 records)"},
		},
		{
			name:     "a job lost in Redis",
			in:       Input{Partitions: []queue.PartitionFunnel{part(0, balanced, 2, 1, 1)}, Gate: gate(100, 0), KafkaLag: map[string]int64{"jobs": 0}},
			problems: []string{"queue partition jobs/p0: its counters say 5 jobs are open (relayed, not ended), but it holds 4 (ready 2, delayed 1, in flight 1): 1 unexplained"},
		},
		{
			name:    "a gate restarted: more settled than produced is said, not flagged",
			in:      Input{Partitions: []queue.PartitionFunnel{part(0, balanced, 2, 2, 1)}, Gate: gate(40, 0), KafkaLag: map[string]int64{"jobs": 0}},
			inKafka: -60,
			notes:   []string{"the relay settled 60 more jobs than the gates read produced"},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := Build(c.in)
			if strings.Join(r.Problems, "\n") != strings.Join(c.problems, "\n") {
				t.Errorf("problems:\n%q\nwant\n%q", r.Problems, c.problems)
			}
			topic := r.Topics[0]
			if topic.InKafka == nil || *topic.InKafka != c.inKafka {
				t.Errorf("in Kafka %v, want %d", topic.InKafka, c.inKafka)
			}
			notes := strings.Join(topic.Notes, "\n")
			for _, n := range c.notes {
				if !strings.Contains(notes, n) {
					t.Errorf("notes %q lack %q", topic.Notes, n)
				}
			}
			var out bytes.Buffer
			if err := Write(&out, r); err != nil {
				t.Fatal(err)
			}
			if ok := strings.Contains(out.String(), "OK: every gap explained"); ok != (len(c.problems) == 0) {
				t.Errorf("text says OK %v with problems %q:\n%s", ok, r.Problems, out.String())
			}
		})
	}
}

func TestBuildJudgesCanariesAndAStoppedMonitor(t *testing.T) {
	now := time.UnixMilli(10_000_000)
	s := canary.Settings{Interval: time.Second, Grace: 500 * time.Millisecond, Started: now.Add(-time.Minute), Beat: now.Add(-10 * time.Second), Holder: "h"}
	rec := canary.Record{Path: canary.Path{Topic: "jobs", KafkaPartition: 0, RedisPartition: 0}, Sent: now.Add(-10 * time.Second),
		DoneSent: now.Add(-10 * time.Second), Done: now.Add(-10*time.Second + 5*time.Millisecond)}
	r := Build(Input{Now: now, CanaryMonitor: true, CanarySettings: s, CanaryRecords: []canary.Record{rec}})
	got := strings.Join(r.Problems, "\n")
	for _, want := range []string{"canary: Redis partition 0: no canary completes", "canary: the canary monitor (h) last sent 10s ago"} {
		if !strings.Contains(got, want) {
			t.Errorf("problems %q lack %q", r.Problems, want)
		}
	}
	if len(r.Unread) == 0 {
		t.Error("no gate metrics given, but nothing said unread")
	}
}
