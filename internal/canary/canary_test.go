package canary

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/queue"
)

func TestPlanCoversEveryPartitionOnBothSides(t *testing.T) {
	for _, c := range []struct {
		kafka int32
		redis int
	}{{8, 8}, {3, 8}, {12, 4}, {1, 1}} {
		layout := queue.Keyspace{Stage: "s", Partitions: c.redis}
		routes := Plan("jobs", c.kafka, layout)
		if len(routes) != max(int(c.kafka), c.redis) {
			t.Errorf("%d×%d: %d routes", c.kafka, c.redis, len(routes))
		}
		kafka, redis := map[int32]bool{}, map[int]bool{}
		for _, r := range routes {
			if !IsCanary(r.Group) {
				t.Errorf("route group %q is not a canary's", r.Group)
			}
			if got := layout.PartitionOf(r.Group); got != r.RedisPartition {
				t.Errorf("group %q lands on Redis partition %d, want %d", r.Group, got, r.RedisPartition)
			}
			kafka[r.KafkaPartition], redis[r.RedisPartition] = true, true
		}
		if len(kafka) != int(c.kafka) || len(redis) != c.redis {
			t.Errorf("%d×%d: covers %d Kafka and %d Redis partitions", c.kafka, c.redis, len(kafka), len(redis))
		}
	}
}

func TestFieldRoundTrip(t *testing.T) {
	p := Path{Topic: "emails.v2", KafkaPartition: 7, RedisPartition: 3}
	got, err := ParseField(p.Field(), 3)
	if err != nil || got != p {
		t.Fatalf("ParseField(%q) = %v, %v", p.Field(), got, err)
	}
	for _, bad := range []string{"", "jobs", "/1", "jobs/-1", "jobs/x", "jobs/03", "jobs/+3"} {
		if _, err := ParseField(bad, 0); err == nil {
			t.Errorf("ParseField(%q) took it", bad)
		}
	}
}

func TestSettingsRoundTrip(t *testing.T) {
	s := Settings{Interval: time.Second, Grace: 500 * time.Millisecond, Started: time.UnixMilli(1000), Beat: time.UnixMilli(2000), Holder: "host:1/x"}
	got, err := DecodeSettings(s.Encode())
	if err != nil || got != s {
		t.Fatalf("DecodeSettings(%q) = %+v, %v", s.Encode(), got, err)
	}
	if _, err := DecodeSettings("1:2:3"); err == nil {
		t.Error("short settings taken")
	}
}

func TestEvaluateAndDiagnose(t *testing.T) {
	start := time.UnixMilli(1_000_000)
	s := Settings{Interval: time.Second, Grace: time.Second, Started: start}
	now := start.Add(10 * time.Second)
	rec := func(topic string, kp int32, rp int, doneSent time.Time) Record {
		r := Record{Path: Path{Topic: topic, KafkaPartition: kp, RedisPartition: rp}, Sent: now.Add(-100 * time.Millisecond)}
		if !doneSent.IsZero() {
			r.DoneSent, r.Done = doneSent, doneSent.Add(20*time.Millisecond)
		}
		return r
	}
	fresh, old := now.Add(-1500*time.Millisecond), now.Add(-4*time.Second)
	records := []Record{
		rec("a", 0, 0, fresh), rec("a", 1, 1, fresh), rec("a", 2, 2, old), // one path of a
		rec("b", 0, 0, old), rec("b", 1, 1, old), // all of b
		rec("c", 0, 2, old),         // partition 2's other path: partition 2 is stale
		rec("d", 0, 3, time.Time{}), // never completed: counted from the start
	}
	st := Evaluate(now, s, records)
	stale := map[string]bool{}
	for _, x := range st {
		stale[x.Path.String()] = x.Stale
	}
	if stale["a/k0→r0"] || !stale["a/k2→r2"] || !stale["b/k0→r0"] || !stale["d/k0→r3"] {
		t.Errorf("stale: %v", stale)
	}
	if st[0].Latency != 20*time.Millisecond || st[0].Age != 1500*time.Millisecond {
		t.Errorf("a/k0: age %v latency %v", st[0].Age, st[0].Latency)
	}
	got := strings.Join(Diagnose(st), "\n")
	for _, want := range []string{"topic b: no canary completes on any of its 2 paths", "Redis partition 2: no canary completes", "Redis partition 3"} {
		if !strings.Contains(got, want) {
			t.Errorf("diagnosis lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "path a/k2") || strings.Contains(got, "topic a") {
		t.Errorf("diagnosis names what partition 2 explains:\n%s", got)
	}
	// A new monitor gives every path its first two intervals.
	s.Started = now.Add(-time.Second)
	for _, x := range Evaluate(now, s, records) {
		if x.Stale {
			t.Errorf("%s stale a second after the monitor started", x.Path)
		}
	}
}

// TestDiagnoseBlamesAMissingWorker: with no worker attached (sluice dev
// --worker=false), every path of the topic is stale; the alert says no
// worker consumes the partitions instead of blaming the relay and the
// gate (issue 32). A topic stale on partitions that do have consumers
// still points at its relay.
func TestDiagnoseBlamesAMissingWorker(t *testing.T) {
	start := time.UnixMilli(1_000_000)
	s := Settings{Interval: time.Second, Grace: time.Second, Started: start}
	now := start.Add(10 * time.Second)
	var records []Record
	for p := range 4 {
		records = append(records, Record{Path: Path{Topic: "jobs", KafkaPartition: int32(p), RedisPartition: p}})
	}
	st := Evaluate(now, s, records)
	got := strings.Join(Diagnose(st, 0, 1, 2, 3), "\n")
	if !strings.Contains(got, "Redis partitions [0 1 2 3]: no worker consumes them") || strings.Contains(got, "relay") || strings.Contains(got, "gate") {
		t.Errorf("no worker anywhere:\n%s", got)
	}
	got = strings.Join(Diagnose(st, 0, 1), "\n")
	if !strings.Contains(got, "Redis partitions [0 1]: no worker consumes them") || !strings.Contains(got, "topic jobs: no canary completes on any of its 2 paths: check the topic's relay") {
		t.Errorf("no worker on 0 and 1, 2 and 3 stale too:\n%s", got)
	}
	if got := strings.Join(Diagnose(st), "\n"); !strings.Contains(got, "topic jobs: no canary completes on any of its 4 paths") {
		t.Errorf("consumers unknown: the relay is the first suspect:\n%s", got)
	}
}

func TestDecodePayload(t *testing.T) {
	if _, err := DecodePayload([]byte(`{"topic":"jobs","kafka_partition":1,"redis_partition":2,"sent_ms":5}`)); err != nil {
		t.Error(err)
	}
	for _, bad := range []string{`{}`, `x`, `{"topic":"jobs","kafka_partition":1,"redis_partition":2}`} {
		if _, err := DecodePayload([]byte(bad)); err == nil {
			t.Errorf("%s taken", bad)
		}
	}
}

// The decoders of what comes from jobs and Redis never panic, and what they
// accept encodes back to itself.
func FuzzDecoders(f *testing.F) {
	f.Add([]byte(`{"topic":"jobs","kafka_partition":1,"redis_partition":2,"sent_ms":5}`), "1000:500:1:2:host/1", "jobs/3")
	f.Add([]byte(`{}`), "::::", "/")
	f.Fuzz(func(t *testing.T, payload []byte, settings, field string) {
		if p, err := DecodePayload(payload); err == nil && (p.Topic == "" || p.SentMS <= 0) {
			t.Fatalf("accepted %q as %+v", payload, p)
		}
		if s, err := DecodeSettings(settings); err == nil {
			if again, err := DecodeSettings(s.Encode()); err != nil || again != s {
				t.Fatalf("settings %q: %+v does not round-trip: %+v %v", settings, s, again, err)
			}
		}
		if p, err := ParseField(field, 1); err == nil && p.Field() != field {
			t.Fatalf("field %q parsed as %+v, encodes as %q", field, p, p.Field())
		}
	})
}
