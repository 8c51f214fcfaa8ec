package gate_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/testenv"
)

const partitions = 4

// testGate is a gate serving on a real listener in front of a kfake cluster.
type testGate struct {
	url   string
	gate  *gate.Gate
	kafka *testenv.KafkaCluster
	stop  context.CancelFunc
	done  chan error
	logs  *testenv.LogBuffer // what it logged, beside the test's log
}

func startGate(t testing.TB, k *testenv.KafkaCluster, mutate func(*gate.Config)) *testGate {
	t.Helper()
	cfg := gate.DefaultConfig()
	cfg.Kafka.Brokers = k.Brokers()
	cfg.AllowNoAuth = true
	cfg.MetadataRefresh = time.Second
	cfg.CallbackResolver = testNames
	if mutate != nil {
		mutate(&cfg)
	}
	logs := &testenv.LogBuffer{}
	log := slog.New(slog.NewTextHandler(io.MultiWriter(testWriter{t}, logs), &slog.HandlerOptions{Level: slog.LevelInfo}))
	g, err := gate.New(context.Background(), cfg, log)
	if err != nil {
		t.Fatalf("gate.New: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tg := &testGate{url: "http://" + ln.Addr().String(), gate: g, kafka: k, stop: cancel, done: make(chan error, 1), logs: logs}
	go func() { tg.done <- g.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-tg.done; err != nil {
			t.Errorf("gate.Serve: %v", err)
		}
	})
	return tg
}

func newKafkaB(b *testing.B) *testenv.KafkaCluster { return newKafka(b) }

func startGateB(b *testing.B, k *testenv.KafkaCluster) *gate.Gate {
	b.Helper()
	return startGate(b, k, nil).gate
}

func newKafka(t testing.TB, opts ...testenv.KafkaOption) *testenv.KafkaCluster {
	return testenv.Kafka(t, append([]testenv.KafkaOption{
		testenv.Topic("jobs", partitions), testenv.Topic("other", 1), testenv.Topic("jobs.dlq", 1),
	}, opts...)...)
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

type answer struct {
	status int
	header http.Header
	body   []byte
}

func (a answer) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(a.body, v); err != nil {
		t.Fatalf("answer %d %s: %v", a.status, a.body, err)
	}
}

func do(t *testing.T, method, url string, body io.Reader, header ...string) answer {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: b}
}

func post(t *testing.T, url, body string, header ...string) answer {
	t.Helper()
	return do(t, http.MethodPost, url, strings.NewReader(body), header...)
}

type accepted struct {
	ID        string `json:"id"`
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
}

// readRecord reads one record back with sarama, as the relay will.
func readRecord(t *testing.T, k *testenv.KafkaCluster, topic string, partition int32, offset int64) *sarama.ConsumerMessage {
	t.Helper()
	return testenv.ReadRecords(t, k.Brokers(), topic, partition, offset, 1)[0]
}

// javaPartition is where the Java client's default partitioner puts key,
// computed by franz-go's independent implementation of it.
func javaPartition(key string, n int) int32 {
	p := kgo.StickyKeyPartitioner(nil).ForTopic("jobs")
	return int32(p.Partition(&kgo.Record{Key: []byte(key)}, n))
}

func TestEnqueueWritesEnvelopeByteForByte(t *testing.T) {
	k := newKafka(t)
	g := startGate(t, k, nil)
	payloads := []string{
		`{"html":"<b>Tom & Jerry</b>","slash":"a\/b","uni":"\u00e9\u2028 \ud83d\ude00","big":123456789012345678901234567890,"f":1.0e+2}`,
		"{ \"spaced\" :\t[ 1 ,2 ],\n \"nested\": {\"a\" : null} }",
		`"a string payload"`,
	}
	for i, payload := range payloads {
		group := fmt.Sprintf("campaign-%d", i)
		body := `{"type":"email.send","group":"` + group + `","tenant":"acme","payload":` + payload + `}`
		a := post(t, g.url+"/v1/topics/jobs/jobs", body)
		if a.status != http.StatusAccepted {
			t.Fatalf("POST: %d %s", a.status, a.body)
		}
		var acc accepted
		a.decode(t, &acc)
		if acc.Topic != "jobs" || len(acc.ID) != 26 {
			t.Fatalf("answer %s", a.body)
		}
		if want := javaPartition(group, partitions); acc.Partition != want {
			t.Fatalf("group %q went to partition %d; the Java client's murmur2 puts it on %d", group, acc.Partition, want)
		}
		m := readRecord(t, k, "jobs", acc.Partition, acc.Offset)
		if string(m.Key) != group {
			t.Fatalf("record key %q, want the group %q", m.Key, group)
		}
		if !bytes.Contains(m.Value, []byte(`"payload":`+payload)) {
			t.Fatalf("payload not byte-identical in Kafka:\n got %s\nwant %s", m.Value, payload)
		}
		j, err := job.Decode(m.Value)
		if err != nil {
			t.Fatalf("record is not an envelope: %v\n%s", err, m.Value)
		}
		if string(j.Payload) != payload || j.ID != acc.ID || j.Topic != "jobs" || j.Type != "email.send" ||
			j.Group != group || j.Tenant != "acme" || j.IDGiven || time.Since(j.EnqueuedAt) > time.Minute {
			t.Fatalf("envelope in Kafka: %+v", j)
		}
	}
}

// checkRecord reads the record an accepted job became and checks the
// rules the gate owns: the key is the group, else the id; a job posted
// without a group has none in Kafka; id_given is true exactly when the
// client chose the id, whatever it sent in id_given.
func checkRecord(t *testing.T, k *testenv.KafkaCluster, id string, partition int32, offset int64, group string, idGiven bool) *job.Job {
	t.Helper()
	m := readRecord(t, k, "jobs", partition, offset)
	j, err := job.Decode(m.Value)
	if err != nil {
		t.Fatalf("record %s: %v", m.Value, err)
	}
	wantKey := group
	if group == "" {
		wantKey = id
		if bytes.Contains(m.Value, []byte(`"group"`)) {
			t.Fatalf("a job posted without a group has one in Kafka: %s", m.Value)
		}
	}
	if j.ID != id || j.Group != group || j.IDGiven != idGiven || string(m.Key) != wantKey {
		t.Fatalf("record key %q %s: want id %q group %q id_given %v key %q", m.Key, m.Value, id, group, idGiven, wantKey)
	}
	return j
}

func TestNoDefaultGroupKeyIsIDAndIDGivenIsTheGates(t *testing.T) {
	k := newKafka(t)
	g := startGate(t, k, nil)
	cases := []struct {
		body, id, group string
		idGiven         bool
	}{
		// The client chose the id: id_given, whatever it claims.
		{`{"type":"t","id":"client-id-1","id_given":false}`, "client-id-1", "", true},
		{`{"type":"t","id":"client-id-2"}`, "client-id-2", "", true},
		// The gate chose it: never id_given.
		{`{"type":"t","id_given":true}`, "", "", false},
		{`{"type":"t","id":null,"id_given":true}`, "", "", false},
		{`{"type":"t","id":"client-id-3","group":"g-1","id_given":false}`, "client-id-3", "g-1", true},
	}
	for _, c := range cases {
		a := post(t, g.url+"/v1/topics/jobs/jobs", c.body)
		var acc accepted
		a.decode(t, &acc)
		if a.status != http.StatusAccepted || (c.id != "" && acc.ID != c.id) || len(acc.ID) == 0 {
			t.Fatalf("POST %s: %d %s", c.body, a.status, a.body)
		}
		if bytes.Contains(a.body, []byte("group")) {
			t.Fatalf("POST %s: the answer names a group: %s", c.body, a.body)
		}
		key := c.group
		if key == "" {
			key = acc.ID
		}
		if acc.Partition != javaPartition(key, partitions) {
			t.Fatalf("POST %s: partition %d, murmur2 of %q puts it on %d", c.body, acc.Partition, key, javaPartition(key, partitions))
		}
		checkRecord(t, k, acc.ID, acc.Partition, acc.Offset, c.group, c.idGiven)
	}

	// The same through a batch.
	var body strings.Builder
	body.WriteString("[")
	for i, c := range cases {
		if i > 0 {
			body.WriteString(",")
		}
		body.WriteString(c.body)
	}
	body.WriteString("]")
	// The ids of the first two are taken now: a batch may reuse them (the
	// relay dedupes), but keep the records apart for the test.
	batch := strings.NewReplacer("client-id-", "batch-id-").Replace(body.String())
	a := post(t, g.url+"/v1/topics/jobs/jobs:batch", batch)
	var ba batchAnswer
	a.decode(t, &ba)
	if a.status != http.StatusAccepted || len(ba.Results) != len(cases) {
		t.Fatalf("batch: %d %s", a.status, a.body)
	}
	for i, c := range cases {
		r := ba.Results[i]
		id := strings.Replace(c.id, "client-id-", "batch-id-", 1)
		if id == "" {
			id = r.ID
		}
		key := c.group
		if key == "" {
			key = id
		}
		if r.ID != id || *r.Partition != javaPartition(key, partitions) {
			t.Fatalf("batch item %d: %+v, want id %q on partition %d", i, r, id, javaPartition(key, partitions))
		}
		checkRecord(t, k, id, *r.Partition, *r.Offset, c.group, c.idGiven)
	}
}

func TestExplicitPartition(t *testing.T) {
	k := newKafka(t)
	g := startGate(t, k, nil)
	for p := range int32(partitions) {
		a := post(t, fmt.Sprintf("%s/v1/topics/jobs/jobs?partition=%d", g.url, p), `{"type":"canary","group":"same-group"}`)
		var acc accepted
		a.decode(t, &acc)
		if a.status != http.StatusAccepted || acc.Partition != p {
			t.Fatalf("?partition=%d: %d %s", p, a.status, a.body)
		}
		checkRecord(t, k, acc.ID, p, acc.Offset, "same-group", false)
		// Without a group: the named partition still wins; the key is the id.
		a = post(t, fmt.Sprintf("%s/v1/topics/jobs/jobs?partition=%d", g.url, p), fmt.Sprintf(`{"type":"t","id":"pinned-%d"}`, p))
		a.decode(t, &acc)
		if a.status != http.StatusAccepted || acc.Partition != p {
			t.Fatalf("?partition=%d without a group: %d %s", p, a.status, a.body)
		}
		checkRecord(t, k, fmt.Sprintf("pinned-%d", p), p, acc.Offset, "", true)
	}
	for _, q := range []string{"4", "-1", "x", "99999999999"} {
		a := post(t, g.url+"/v1/topics/jobs/jobs?partition="+q, `{"type":"t"}`)
		if a.status != http.StatusBadRequest || !strings.Contains(string(a.body), "partitions 0..3") {
			t.Fatalf("?partition=%s: %d %s", q, a.status, a.body)
		}
	}
}

// The default acks level is all, through the idempotent producer (Kafka's
// own producer default): a POST without Sluice-Acks is written by a
// producer with a producer id, as are Sluice-Acks: all and ?acks=all;
// Sluice-Acks: leader (the opt-in) is written by the plain producer, with
// none. sarama produces idempotently only at acks=all, so the producer id
// tells which producer wrote the record.
func TestAcksAllIsTheDefault(t *testing.T) {
	k := newKafka(t, testenv.Brokers(3))
	g := startGate(t, k, nil)
	url := g.url + "/v1/topics/jobs/jobs"
	for _, c := range []struct {
		name       string
		url        string
		header     []string
		idempotent bool
	}{
		{"no acks given", url, nil, true},
		{"Sluice-Acks: all", url, []string{"Sluice-Acks", "all"}, true},
		{"?acks=all", url + "?acks=all", nil, true},
		{"Sluice-Acks: leader", url, []string{"Sluice-Acks", "leader"}, false},
		{"?acks=1", url + "?acks=1", nil, false},
	} {
		a := post(t, c.url, `{"type":"t","payload":{"x":"<&>"}}`, c.header...)
		if a.status != http.StatusAccepted {
			t.Fatalf("%s: %d %s", c.name, a.status, a.body)
		}
		var acc accepted
		a.decode(t, &acc)
		r := readRecordKgo(t, k, "jobs", acc.Partition, acc.Offset)
		if !bytes.Contains(r.Value, []byte(`{"x":"<&>"}`)) {
			t.Fatalf("%s: record %s", c.name, r.Value)
		}
		if got := r.ProducerID >= 0; got != c.idempotent {
			t.Errorf("%s: written by the idempotent (acks=all) producer: %v, want %v (producer id %d)", c.name, got, c.idempotent, r.ProducerID)
		}
	}
	if a := post(t, url+"?acks=2", `{"type":"t"}`); a.status != http.StatusBadRequest {
		t.Fatalf("acks=2: %d %s", a.status, a.body)
	}
}

// readRecordKgo reads the record at offset with franz-go, which, unlike
// sarama's consumer, shows the producer id a record batch carries.
func readRecordKgo(t *testing.T, k *testenv.KafkaCluster, topic string, partition int32, offset int64) *kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers()...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{
		topic: {partition: kgo.NewOffset().At(offset)},
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("read %s/%d@%d: %v", topic, partition, offset, err)
		}
		for _, r := range fs.Records() {
			if r.Offset == offset {
				return r
			}
		}
	}
}

type batchAnswer struct {
	Accepted int `json:"accepted"`
	Rejected int `json:"rejected"`
	Results  []struct {
		Index     int    `json:"index"`
		Status    int    `json:"status"`
		ID        string `json:"id"`
		Partition *int32 `json:"partition"`
		Offset    *int64 `json:"offset"`
		Error     string `json:"error"`
		Field     string `json:"field"`
	} `json:"results"`
}

func TestBatchArrayAndNDJSON(t *testing.T) {
	k := newKafka(t)
	g := startGate(t, k, nil)
	var arr, nd strings.Builder
	arr.WriteString("[")
	for i := range 100 {
		item := fmt.Sprintf(`{"type":"t","group":"g%d","payload":{"i":%d,"s":"<%d>"}}`, i%7, i, i)
		if i > 0 {
			arr.WriteString(",\n")
		}
		arr.WriteString(item)
		nd.WriteString(item + "\n")
	}
	arr.WriteString("]")
	for name, body := range map[string]string{"array": arr.String(), "ndjson": nd.String()} {
		a := post(t, g.url+"/v1/topics/jobs/jobs:batch", body, "Content-Type", "application/x-ndjson")
		if a.status != http.StatusAccepted {
			t.Fatalf("%s: %d %s", name, a.status, a.body)
		}
		var ba batchAnswer
		a.decode(t, &ba)
		if ba.Accepted != 100 || ba.Rejected != 0 || len(ba.Results) != 100 {
			t.Fatalf("%s: %+v", name, ba)
		}
		for _, i := range []int{0, 57, 99} {
			r := ba.Results[i]
			m := readRecord(t, k, "jobs", *r.Partition, *r.Offset)
			want := fmt.Sprintf(`"payload":{"i":%d,"s":"<%d>"}`, i, i)
			if !bytes.Contains(m.Value, []byte(want)) || !bytes.Contains(m.Value, []byte(r.ID)) {
				t.Fatalf("%s item %d: record %s", name, i, m.Value)
			}
			if *r.Partition != javaPartition(fmt.Sprintf("g%d", i%7), partitions) {
				t.Fatalf("%s item %d on partition %d", name, i, *r.Partition)
			}
		}
	}
}

func TestBatchReportsEachItem(t *testing.T) {
	k := newKafka(t)
	g := startGate(t, k, nil)
	body := `[{"type":"a"}, {"type":"b","priority":"high"}, {"payload":1}, {"type":"d","unknown":1}, {"type":"e"}]`
	a := post(t, g.url+"/v1/topics/jobs/jobs:batch", body)
	if a.status != http.StatusMultiStatus {
		t.Fatalf("mixed batch: %d %s", a.status, a.body)
	}
	var ba batchAnswer
	a.decode(t, &ba)
	wantStatus := []int{202, 400, 400, 400, 202}
	wantField := []string{"", "priority", "type", "unknown", ""}
	for i, r := range ba.Results {
		if r.Index != i || r.Status != wantStatus[i] || r.Field != wantField[i] {
			t.Fatalf("item %d: %+v", i, r)
		}
	}
	if ba.Accepted != 2 || ba.Rejected != 3 {
		t.Fatalf("%+v", ba)
	}
	// Every item invalid: 400, nothing produced.
	a = post(t, g.url+"/v1/topics/jobs/jobs:batch", `[{"x":1},{"type":"has space"}]`)
	if a.status != http.StatusBadRequest {
		t.Fatalf("all invalid: %d %s", a.status, a.body)
	}
}

func TestBatchLimitsAndSyntax(t *testing.T) {
	k := newKafka(t)
	g := startGate(t, k, func(c *gate.Config) { c.MaxBatchJobs = 3; c.MaxBatchBytes = 1000 })
	a := post(t, g.url+"/v1/topics/jobs/jobs:batch", strings.Repeat(`{"type":"t"}`+"\n", 4))
	if a.status != http.StatusRequestEntityTooLarge || !strings.Contains(string(a.body), "more than 3 jobs") {
		t.Fatalf("4 jobs over a limit of 3: %d %s", a.status, a.body)
	}
	a = post(t, g.url+"/v1/topics/jobs/jobs:batch", `[{"type":"t","payload":"`+strings.Repeat("x", 1000)+`"}]`)
	if a.status != http.StatusRequestEntityTooLarge {
		t.Fatalf("body over max-batch-bytes: %d %s", a.status, a.body)
	}
	a = post(t, g.url+"/v1/topics/jobs/jobs:batch", "[{\"type\":\"t\"},\n {\"type\": t}]")
	var eb struct {
		Error        string
		Line, Column int
	}
	a.decode(t, &eb)
	if a.status != http.StatusBadRequest || eb.Line != 2 || eb.Column != 12 {
		t.Fatalf("syntax error: %d %s", a.status, a.body)
	}
	for _, body := range []string{``, `[]`, `  `} {
		if a := post(t, g.url+"/v1/topics/jobs/jobs:batch", body); a.status != http.StatusBadRequest {
			t.Fatalf("empty batch %q: %d %s", body, a.status, a.body)
		}
	}
}

func TestBadRequestsAreClear4xx(t *testing.T) {
	k := newKafka(t)
	g := startGate(t, k, func(c *gate.Config) { c.MaxBodyBytes = 2048; c.Topics = []string{"jobs", "jobs.dlq", "missing"} })
	big := `{"type":"t","payload":"` + strings.Repeat("x", 2048) + `"}`
	cases := []struct {
		name, method, path, body string
		status                   int
		inError                  string
	}{
		{"malformed", "POST", "/v1/topics/jobs/jobs", "{\"type\":\"t\",\n\"payload\":{]}", 400, "line 2, column 12"},
		{"missing type", "POST", "/v1/topics/jobs/jobs", `{"payload":{}}`, 400, `field "type": required`},
		{"wrong type", "POST", "/v1/topics/jobs/jobs", `{"type":"t","max_attempts":"3"}`, 400, `field "max_attempts": want an integer`},
		{"unknown field", "POST", "/v1/topics/jobs/jobs", `{"type":"t","prioirty":3}`, 400, `field "prioirty": unknown field`},
		{"not an object", "POST", "/v1/topics/jobs/jobs", `[1,2]`, 400, "want a job object"},
		{"empty", "POST", "/v1/topics/jobs/jobs", ``, 400, "empty body"},
		{"trailing", "POST", "/v1/topics/jobs/jobs", `{"type":"t"}{}`, 400, "after the job"},
		{"topic mismatch", "POST", "/v1/topics/jobs/jobs", `{"type":"t","topic":"other"}`, 400, `field "topic"`},
		{"too large", "POST", "/v1/topics/jobs/jobs", big, 413, "over the limit"},
		{"unknown topic", "POST", "/v1/topics/missing/jobs", `{"type":"t"}`, 404, "does not exist"},
		{"not allowed topic", "POST", "/v1/topics/other/jobs", `{"type":"t"}`, 403, "not served by this gate"},
		{"internal topic", "POST", "/v1/topics/jobs.dlq/jobs", `{"type":"t"}`, 403, "internal"},
		{"wrong method", "GET", "/v1/topics/jobs/jobs", ``, 405, "use POST"},
		{"wrong method batch", "PUT", "/v1/topics/jobs/jobs:batch", `[]`, 405, "use POST"},
	}
	for _, c := range cases {
		a := do(t, c.method, g.url+c.path, strings.NewReader(c.body))
		var eb struct{ Error string }
		a.decode(t, &eb)
		if a.status != c.status || !strings.Contains(eb.Error, c.inError) {
			t.Errorf("%s: got %d %q, want %d containing %q", c.name, a.status, eb.Error, c.status, c.inError)
		}
		if c.status == 405 && a.header.Get("Allow") != "POST" {
			t.Errorf("%s: Allow %q", c.name, a.header.Get("Allow"))
		}
	}
	// A body without Content-Length (chunked) is cut at the limit too.
	pr, pw := io.Pipe()
	go func() { pw.Write([]byte(big)); pw.Close() }()
	if a := do(t, "POST", g.url+"/v1/topics/jobs/jobs", pr); a.status != 413 {
		t.Fatalf("chunked body over the limit: %d %s", a.status, a.body)
	}
}

func TestUnknownTopicWithoutAllowList(t *testing.T) {
	k := newKafka(t)
	g := startGate(t, k, nil)
	// The 404 names the command that creates the topic (issue 32).
	if a := post(t, g.url+"/v1/topics/nope/jobs", `{"type":"t"}`); a.status != 404 || !strings.Contains(string(a.body), "`sluice topics create nope`") {
		t.Fatalf("unknown topic: %d %s, want a 404 naming `sluice topics create nope`", a.status, a.body)
	}
	// A topic created after the gate started is found without a restart.
	k.CreateTopic("fresh", 2)
	testenv.WaitFor(t, 10*time.Second, "the new topic to be served", func() bool {
		return post(t, g.url+"/v1/topics/fresh/jobs", `{"type":"t"}`).status == http.StatusAccepted
	})
}

func TestBearerTokens(t *testing.T) {
	k := newKafka(t)
	g := startGate(t, k, func(c *gate.Config) {
		c.AllowNoAuth = false
		c.Tokens = "jobs-only-token-0123456789 jobs; all-topics-token-0123456789 *"
	})
	url := g.url + "/v1/topics/%s/jobs"
	check := func(topic, token string, want int) {
		t.Helper()
		var hdr []string
		if token != "" {
			hdr = []string{"Authorization", "Bearer " + token}
		}
		if a := post(t, fmt.Sprintf(url, topic), `{"type":"t"}`, hdr...); a.status != want {
			t.Fatalf("topic %s token %q: %d %s, want %d", topic, token, a.status, a.body, want)
		}
	}
	check("jobs", "", 401)
	check("jobs", "wrong-token-0123456789", 401)
	check("other", "jobs-only-token-0123456789", 403)
	check("jobs", "jobs-only-token-0123456789", 202)
	check("other", "all-topics-token-0123456789", 202)
}

func TestNoTokensRefusesToStartWithoutAllowNoAuth(t *testing.T) {
	k := newKafka(t)
	cfg := gate.DefaultConfig()
	cfg.Kafka.Brokers = k.Brokers()
	_, err := gate.New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "Config.AllowNoAuth") {
		t.Fatalf("gate.New without tokens: %v", err)
	}
}

func TestKafkaDownIs503AndRecovers(t *testing.T) {
	k := newKafka(t, testenv.DataDir(t.TempDir()))
	g := startGate(t, k, func(c *gate.Config) { c.ProduceTimeout = 20 * time.Second; c.RetryAfter = 2 * time.Second })
	if a := post(t, g.url+"/v1/topics/jobs/jobs", `{"type":"t"}`); a.status != 202 {
		t.Fatalf("before: %d %s", a.status, a.body)
	}
	k.Stop()
	a := post(t, g.url+"/v1/topics/jobs/jobs", `{"type":"t"}`)
	if a.status != http.StatusServiceUnavailable || a.header.Get("Retry-After") != "2" {
		t.Fatalf("Kafka down: %d Retry-After %q %s", a.status, a.header.Get("Retry-After"), a.body)
	}
	testenv.WaitFor(t, 10*time.Second, "/readyz to fail", func() bool {
		return do(t, "GET", g.url+"/readyz", nil).status == http.StatusServiceUnavailable
	})
	// Now known down: answered at once, not after a produce timeout.
	start := time.Now()
	if a := post(t, g.url+"/v1/topics/jobs/jobs", `{"type":"t"}`); a.status != http.StatusServiceUnavailable {
		t.Fatalf("Kafka known down: %d %s", a.status, a.body)
	} else if time.Since(start) > 5*time.Second {
		t.Fatalf("a request while Kafka is known down took %s", time.Since(start))
	}
	k.Start()
	testenv.WaitFor(t, 30*time.Second, "the gate to accept again", func() bool {
		return post(t, g.url+"/v1/topics/jobs/jobs", `{"type":"t"}`).status == http.StatusAccepted
	})
	if a := do(t, "GET", g.url+"/readyz", nil); a.status != 200 {
		t.Fatalf("/readyz after recovery: %d %s", a.status, a.body)
	}
}

// holdProduce makes kfake hold every produce request until release is closed.
func holdProduce(k *testenv.KafkaCluster) (release func()) {
	ch := make(chan struct{})
	c := k.Cluster()
	c.ControlKey(kmsg.Produce.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		c.SleepControl(func() { <-ch })
		return nil, nil, false
	})
	return func() { close(ch) }
}

func TestProduceDeadlineIs504WithIDs(t *testing.T) {
	k := newKafka(t)
	g := startGate(t, k, func(c *gate.Config) { c.ProduceTimeout = 300 * time.Millisecond })
	release := holdProduce(k)
	a := post(t, g.url+"/v1/topics/jobs/jobs", `{"type":"t","id":"resend-me"}`)
	var eb struct {
		Error string
		IDs   []string
	}
	a.decode(t, &eb)
	if a.status != http.StatusGatewayTimeout || len(eb.IDs) != 1 || eb.IDs[0] != "resend-me" {
		t.Fatalf("held produce: %d %s", a.status, a.body)
	}
	a = post(t, g.url+"/v1/topics/jobs/jobs:batch", `[{"type":"t","id":"b1"},{"type":"t","id":"b2"}]`)
	a.decode(t, &eb)
	if a.status != http.StatusGatewayTimeout || strings.Join(eb.IDs, ",") != "b1,b2" {
		t.Fatalf("held batch: %d %s", a.status, a.body)
	}
	release()
	testenv.WaitFor(t, 10*time.Second, "produce to work again", func() bool {
		return post(t, g.url+"/v1/topics/jobs/jobs", `{"type":"t"}`).status == http.StatusAccepted
	})
}

func TestShutdownDrainsInFlightRequests(t *testing.T) {
	k := newKafka(t)
	g := startGate(t, k, nil)
	release := holdProduce(k)
	got := make(chan answer, 1)
	go func() { got <- post(t, g.url+"/v1/topics/jobs/jobs", `{"type":"t"}`) }()
	testenv.WaitFor(t, 10*time.Second, "the request to be in flight", func() bool {
		return metricValue(t, g.gate, "sluice_gate_inflight_requests") == 1
	})
	g.stop()
	select {
	case err := <-g.done:
		t.Fatalf("Serve returned %v with a request in flight", err)
		g.done <- err
	case <-time.After(200 * time.Millisecond):
		// Serve must still be draining; the listener is closed already.
	}
	release()
	if a := <-got; a.status != http.StatusAccepted {
		t.Fatalf("in-flight request during shutdown: %d %s", a.status, a.body)
	}
	err := <-g.done
	g.done <- err // for the cleanup
	if err != nil {
		t.Fatalf("Serve: %v", err)
	}
}

func TestHealthReadyAndMetrics(t *testing.T) {
	k := newKafka(t)
	g := startGate(t, k, nil)
	if a := do(t, "GET", g.url+"/healthz", nil); a.status != 200 {
		t.Fatalf("/healthz: %d", a.status)
	}
	if a := do(t, "GET", g.url+"/readyz", nil); a.status != 200 {
		t.Fatalf("/readyz: %d %s", a.status, a.body)
	}
	post(t, g.url+"/v1/topics/jobs/jobs", `{"type":"t"}`)
	post(t, g.url+"/v1/topics/jobs/jobs", `{}`)
	post(t, g.url+"/v1/topics/jobs/jobs:batch", `[{"type":"t"},{"type":"t"}]`)
	a := do(t, "GET", g.url+"/metrics", nil)
	for _, want := range []string{
		`sluice_gate_requests_total{code="202",route="job"} 1`,
		`sluice_gate_requests_total{code="400",route="job"} 1`,
		`sluice_gate_requests_total{code="202",route="batch"} 1`,
		`sluice_gate_jobs_total{outcome="accepted",topic="jobs"} 3`,
		`sluice_gate_batch_size_jobs_count 1`,
		`sluice_gate_produce_duration_seconds_count{acks="all"} 2`,
		`sluice_gate_request_duration_seconds_count{route="job"} 2`,
		`sluice_gate_inflight_requests 0`,
	} {
		if !strings.Contains(string(a.body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// names is a resolver of made-up names, so that no lookup leaves the
// process.
type names map[string]string

func (n names) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := n[host]; ok {
		return []netip.Addr{netip.MustParseAddr(a)}, nil
	}
	return nil, &net.DNSError{Err: "no such host (the test resolves only its own names)", Name: host, IsNotFound: true}
}

// testNames: cb.example and cb are public receivers (documentation
// addresses, never dialled by the gate), inside.test a private one.
var testNames = names{"cb.example": "203.0.113.10", "cb": "203.0.113.11", "inside.test": "10.0.0.5", "localhost": "127.0.0.1"}
