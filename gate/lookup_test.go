package gate_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/testenv"
)

// GET /v1/topics/{topic}/jobs/{id} follows a job the gate accepted: in
// Kafka by its position until the relay applies it, then on its lane,
// then claimed; a bad query is a 400, an unknown job a 404 with the same
// answer, a gate without Redis a 501.
func TestJobLookup(t *testing.T) {
	k := newKafka(t)
	noRedis := startGate(t, k, nil)
	if a := do(t, http.MethodGet, noRedis.url+"/v1/topics/jobs/jobs/x", nil); a.status != http.StatusNotImplemented {
		t.Fatalf("without Redis: %d %s", a.status, a.body)
	}
	r := testenv.Redis(t)
	g := startGate(t, k, func(c *gate.Config) { c.RedisAddr = r.Addr() })
	var posted struct {
		ID        string `json:"id"`
		Partition int32  `json:"partition"`
		Offset    int64  `json:"offset"`
	}
	a := do(t, http.MethodPost, g.url+"/v1/topics/jobs/jobs", strings.NewReader(`{"type":"t","group":"grp"}`))
	a.decode(t, &posted)
	if a.status != http.StatusAccepted || posted.ID == "" {
		t.Fatalf("post: %d %s", a.status, a.body)
	}
	lookup := g.url + "/v1/topics/jobs/jobs/" + posted.ID + "?group=grp&partition=" + strconv.Itoa(int(posted.Partition)) +
		"&offset=" + strconv.FormatInt(posted.Offset, 10)
	var v queue.JobView
	if a := do(t, http.MethodGet, lookup, nil); a.status != http.StatusOK {
		t.Fatalf("in Kafka: %d %s", a.status, a.body)
	} else if a.decode(t, &v); v.State != queue.WhereInKafka || v.ID != posted.ID || v.Note == "" {
		t.Fatalf("in Kafka: %s", a.body)
	}

	// The relay's write of it (its position, its group).
	p, err := queue.NewPool(queue.PoolConfig{Keyspace: queue.Keyspace{Stage: "dev", Partitions: 8}, Addr: r.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	p.LoadScripts(ctx)
	if _, err := p.Enqueue(ctx, 1, []queue.Item{{ID: posted.ID, Group: "grp", Topic: "jobs", Weight: 1, Envelope: []byte(`{"type":"t"}`),
		HasPosition: true, KafkaPartition: posted.Partition, Offset: posted.Offset}}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if a := do(t, http.MethodGet, lookup, nil); a.status != http.StatusOK {
		t.Fatalf("ready: %d %s", a.status, a.body)
	} else if a.decode(t, &v); v.State != queue.WhereReady || v.Why != "g/grp" {
		t.Fatalf("ready: %s", a.body)
	}
	q := p.Keyspace().QueueOf("jobs", "grp", posted.ID)
	if _, err := p.Claim(ctx, q, 1, time.Minute); err != nil {
		t.Fatal(err)
	}
	if a := do(t, http.MethodGet, lookup, nil); a.status != http.StatusOK {
		t.Fatalf("running: %d %s", a.status, a.body)
	} else if a.decode(t, &v); v.State != queue.WhereRunning || v.Batch == "" || v.Until == nil || v.Attempts != 1 {
		t.Fatalf("running: %s", a.body)
	}

	if a := do(t, http.MethodGet, g.url+"/v1/topics/jobs/jobs/nope", nil); a.status != http.StatusNotFound {
		t.Fatalf("unknown: %d %s", a.status, a.body)
	} else if a.decode(t, &v); v.State != queue.WhereNotFound || !strings.Contains(v.Note, "partition and offset") {
		t.Fatalf("unknown: %s", a.body)
	}
	for _, bad := range []string{"/v1/topics/jobs/jobs/x?partition=1", "/v1/topics/jobs/jobs/x?partition=a&offset=1", "/v1/topics/no:pe/jobs/x"} {
		if a := do(t, http.MethodGet, g.url+bad, nil); a.status != http.StatusBadRequest {
			t.Fatalf("%s: %d %s", bad, a.status, a.body)
		}
	}
}
