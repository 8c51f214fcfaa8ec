package gate_test

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
)

// TestApacheKafkaGate runs the gate against one real Apache Kafka broker
// (bin/kafka, `make kafka`), started once for its subtests: the produce at
// both acks levels, chosen by header and by query, and a topic deleted and
// created again under a running gate.
func TestApacheKafkaGate(t *testing.T) {
	start := time.Now()
	k := newKafka(t, testenv.ApacheKafka())
	t.Logf("the broker started in %s", time.Since(start).Round(time.Millisecond))
	g := startGate(t, k, nil)

	t.Run("acks", func(t *testing.T) {
		for _, acks := range []string{"leader", "all"} {
			for _, how := range []string{"header", "query"} {
				url, hdr := g.url+"/v1/topics/jobs/jobs", []string{"Sluice-Acks", acks}
				if how == "query" {
					url, hdr = url+"?acks="+acks, nil
				}
				payload := fmt.Sprintf(`{"acks":%q,"how":%q,"html":"<&>"}`, acks, how)
				a := post(t, url, `{"type":"t","payload":`+payload+`}`, hdr...)
				if a.status != http.StatusAccepted {
					t.Fatalf("acks=%s by %s: %d %s", acks, how, a.status, a.body)
				}
				var acc accepted
				a.decode(t, &acc)
				if m := readRecord(t, k, "jobs", acc.Partition, acc.Offset); !bytes.Contains(m.Value, []byte(`"payload":`+payload)) {
					t.Fatalf("acks=%s by %s: record at %d/%d is %s", acks, how, acc.Partition, acc.Offset, m.Value)
				}
			}
		}
		if body := string(do(t, http.MethodGet, g.url+"/metrics", nil).body); !strings.Contains(body, `sluice_gate_produce_duration_seconds_count{acks="all"} 2`) ||
			!strings.Contains(body, `sluice_gate_produce_duration_seconds_count{acks="leader"} 2`) {
			t.Fatalf("the produce metric does not count two of each acks level:\n%s", body)
		}
	})

	// A deleted topic is a 404, and a topic made again under the
	// same name takes jobs again, into a new log from offset 0.
	t.Run("topic deleted and recreated", func(t *testing.T) {
		url := g.url + "/v1/topics/other/jobs"
		if a := post(t, url, `{"type":"t"}`); a.status != http.StatusAccepted {
			t.Fatalf("before the deletion: %d %s", a.status, a.body)
		}
		k.DeleteTopic("other")
		var last answer
		testenv.WaitFor(t, 30*time.Second, "a 404 for the deleted topic", func() bool {
			last = post(t, url, `{"type":"t"}`)
			return last.status == http.StatusNotFound
		})
		// Whichever saw it first: the produce (Kafka's UNKNOWN_TOPIC) or
		// the refreshed topic list.
		if b := string(last.body); !strings.Contains(b, "does not exist") {
			t.Fatalf("404 for the deleted topic: %s", last.body)
		}
		k.CreateTopic("other", 1)
		testenv.WaitFor(t, 30*time.Second, "the recreated topic to take a job", func() bool {
			last = post(t, url, `{"type":"t","id":"after-recreate"}`)
			return last.status == http.StatusAccepted
		})
		var acc accepted
		last.decode(t, &acc)
		if acc.Offset != 0 {
			t.Fatalf("the first job into the recreated topic at offset %d, want 0 (a new log)", acc.Offset)
		}
		checkRecordIn(t, k, "other", acc)
	})
}

// checkRecordIn reads acc's record from topic and checks it is acc's job.
func checkRecordIn(t *testing.T, k *testenv.KafkaCluster, topic string, acc accepted) {
	t.Helper()
	m := readRecord(t, k, topic, acc.Partition, acc.Offset)
	if !bytes.Contains(m.Value, []byte(`"id":"`+acc.ID+`"`)) {
		t.Fatalf("record at %s/%d/%d is %s, want job %s", topic, acc.Partition, acc.Offset, m.Value, acc.ID)
	}
}
