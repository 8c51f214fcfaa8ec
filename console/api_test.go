package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	consulapi "github.com/hashicorp/consul/api"

	"github.com/sluicehq/sluice/console"
	"github.com/sluicehq/sluice/internal/admin"
	"github.com/sluicehq/sluice/internal/funnel"
	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/kafka"
	"github.com/sluicehq/sluice/internal/limits"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/scaling"
	"github.com/sluicehq/sluice/internal/testenv"
)

// TestAdminAuth: no token 401, an unknown one 401, a read token reads but
// cannot change (403), an admin token can; no tokens configured is 403
// with the settings to set, and AdminInsecure lets everyone in. Each
// request is counted by route and code, under the metric's name from when
// the coordinator served the API.
func TestAdminAuth(t *testing.T) {
	b := newBed(t, 2)
	c := b.start(t, "c1", nil)
	for _, tc := range []struct {
		method, path, token string
		body                any
		want                int
	}{
		{"GET", "/api/v1/whoami", "", nil, 401},
		{"GET", "/api/v1/whoami", "not-a-token-at-all", nil, 401},
		{"GET", "/api/v1/whoami", readToken, nil, 200},
		{"GET", "/api/v1/rates/jobs", readToken, nil, 200},
		{"PUT", "/api/v1/rates/jobs", readToken, admin.RateSet{Rate: 5}, 403},
		{"POST", "/api/v1/rates/jobs/pause", readToken, nil, 403},
		{"PUT", "/api/v1/rates/jobs", adminToken, admin.RateSet{Rate: 5}, 200},
		{"GET", "/api/v1/nothing-here", adminToken, nil, 404},
	} {
		code, body := c.call(t, tc.method, tc.path, tc.token, tc.body)
		if code != tc.want {
			t.Errorf("%s %s with %q: %d %s, want %d", tc.method, tc.path, tc.token, code, body, tc.want)
		}
		if code >= 400 {
			apiError(t, body)
		}
	}
	var who admin.WhoAmI
	_, body := c.call(t, "GET", "/api/v1/whoami", readToken, nil)
	if json.Unmarshal(body, &who); who.Role != "read" {
		t.Errorf("whoami with the read token: %s", body)
	}
	if n := testenv.Metric(t, c.c.Registry(), "sluice_coordinator_admin_requests_total", "code", "403", "route", "PUT /api/v1/rates/{topic}"); n != 1 {
		t.Errorf("403s on PUT rates counted %g, want 1", n)
	}

	none := b.start(t, "c2", func(c *console.Config) { c.AdminTokens = "" })
	code, body := none.call(t, "GET", "/api/v1/whoami", adminToken, nil)
	if e := apiError(t, body); code != 403 || !strings.Contains(e.Fix, "the console's Config.AdminTokens") || strings.Contains(e.Fix, "--") {
		t.Errorf("without tokens: %d %s, want 403 naming Config.AdminTokens", code, body)
	}
	// A program that runs the console names its settings its own way.
	named := b.start(t, "c3", func(c *console.Config) {
		c.AdminTokens = ""
		c.SettingName = func(field string) string { return "setting " + field }
	})
	if _, body := named.call(t, "GET", "/api/v1/whoami", adminToken, nil); !strings.Contains(apiError(t, body).Fix, "setting AdminTokensFile") {
		t.Errorf("without tokens, with SettingName: %s", body)
	}
	open := b.start(t, "c4", func(c *console.Config) { c.AdminTokens, c.AdminInsecure = "", true })
	if code, body := open.call(t, "POST", "/api/v1/rates/jobs/pause", "", nil); code != 200 {
		t.Errorf("AdminInsecure: %d %s", code, body)
	}
}

// TestNewNamesTheField: a bad token or tokens file is an error of New
// that names the Config field, never shows the token, and names no flag.
func TestNewNamesTheField(t *testing.T) {
	for _, c := range []struct {
		mutate func(*console.Config)
		want   string
	}{
		{func(c *console.Config) { c.AdminTokens = "secret-token-x root" }, "console: Config.AdminTokens: token entry 1"},
		{func(c *console.Config) { c.AdminTokens, c.AdminTokensFile = "", "/nonexistent/tokens" }, "console: Config.AdminTokensFile: "},
		{func(c *console.Config) { c.ConsumerTTL = 0 }, "console: Config.ConsumerTTL: "},
		{func(c *console.Config) { c.Partitions = 0 }, "console: Config.Partitions: "},
		{func(c *console.Config) { c.Topics = []string{"a:b"} }, "console: Config.Topics: "},
	} {
		cfg := console.DefaultConfig()
		c.mutate(&cfg)
		_, err := console.New(cfg, slog.New(slog.DiscardHandler))
		if err == nil || !strings.HasPrefix(err.Error(), c.want) || strings.Contains(err.Error(), "secret-token-x") || strings.Contains(err.Error(), "--") {
			t.Errorf("New: %v, want %q...", err, c.want)
		}
	}
}

// deadJob enqueues a job (in group, or on its topic's shared lane when
// group is "") and fails it to the dead set. It returns the job's queue
// partition and envelope.
func (b *bed) deadJob(t *testing.T, id, group, topic, cause string) (queue.Queue, []byte) {
	t.Helper()
	ctx := context.Background()
	env := fmt.Sprintf(`{"id":%q,"topic":%q,"type":"email","group":%q,"payload":{}}`, id, topic, group)
	if group == "" {
		env = fmt.Sprintf(`{"id":%q,"topic":%q,"type":"email","payload":{}}`, id, topic)
	}
	if _, err := b.pool.Enqueue(ctx, 1, []queue.Item{{ID: id, Group: group, Topic: topic, Weight: 1, Envelope: []byte(env)}}, time.Now()); err != nil {
		t.Fatal(err)
	}
	q := b.layout.QueueOf(topic, group, id)
	jobs, err := b.pool.Claim(ctx, q, 10, time.Minute)
	if err != nil || len(jobs) != 1 || jobs[0].ID != id {
		t.Fatalf("claim: %v %v", jobs, err)
	}
	f := queue.Failure{Job: jobs[0], Cause: cause}
	if r, err := b.pool.Fail(ctx, q, f, time.Now(), queue.DeadLimits{Max: 100, Keep: time.Hour}); r != queue.FailDead || err != nil {
		t.Fatalf("fail: %d %v", r, err)
	}
	return q, []byte(env)
}

// claimAll claims what every partition of the topics has ready, by id.
func (b *bed) claimAll(t *testing.T, topics ...string) map[string]queue.Claimed {
	t.Helper()
	out := map[string]queue.Claimed{}
	for _, topic := range topics {
		for part := range b.layout.Partitions {
			jobs, err := b.pool.Claim(context.Background(), queue.Queue{Topic: topic, Part: part}, 100, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			for _, j := range jobs {
				out[j.ID] = j
			}
		}
	}
	return out
}

// balanced checks that the funnel explains every job in Redis.
func (b *bed) balanced(t *testing.T) {
	t.Helper()
	in, err := funnel.Gather(context.Background(), b.pool, funnel.Sources{}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if r := funnel.Build(in); len(r.Problems) > 0 {
		t.Errorf("the funnel does not balance: %v", r.Problems)
	}
}

// TestAdminDeadJobReplayedRunsAgain: a dead job lists with its error and
// attempts, replays to its lane with its attempts reset (a group's, or its
// topic's shared lane for a job without a group), is claimed with its
// envelope as it was and runs again; the funnel balances throughout; a
// purge removes one for good; a replay of what is gone is a 409.
func TestAdminDeadJobReplayedRunsAgain(t *testing.T) {
	b := newBed(t, 4)
	c := b.start(t, "c1", nil)
	b.register(t, "other")
	part, envA := b.deadJob(t, "job-a", "g-job-a", "jobs", "smtp: 550 no such mailbox")
	b.deadJob(t, "job-b", "g-job-b", "jobs", "boom")
	b.deadJob(t, "job-c", "g-job-c", "other", "bang")
	partD, envD := b.deadJob(t, "job-d", "", "jobs", "no group")
	b.balanced(t)

	var list admin.DLQList
	c.must(t, "GET", "/api/v1/dlq?source=redis&topic=jobs", nil, &list)
	if len(list.Entries) != 3 || list.NextCursor != "" {
		t.Fatalf("dead jobs of topic jobs: %+v", list)
	}
	// Paging one at a time finds all four, newest first, none twice.
	var seen []string
	cursor := ""
	for range 6 {
		var page admin.DLQList
		c.must(t, "GET", "/api/v1/dlq?source=redis&limit=1&cursor="+cursor, nil, &page)
		for _, e := range page.Entries {
			seen = append(seen, e.ID)
		}
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	if slices.Sort(seen); !slices.Equal(seen, []string{"job-a", "job-b", "job-c", "job-d"}) {
		t.Errorf("paging by one found %v", seen)
	}
	var e admin.DLQEntry
	c.must(t, "GET", "/api/v1/dlq/entry?source=redis&id=job-a", nil, &e)
	if e.LastError != "smtp: 550 no such mailbox" || e.Attempts != 1 || e.Topic != "jobs" || e.Type != "email" || e.Group != "g-job-a" ||
		e.Partition != part.Part || e.DeadAt == nil || string(e.Envelope) != string(envA) {
		t.Errorf("entry: %+v", e)
	}
	// A job without a group lives in the partition its id picks.
	c.must(t, "GET", "/api/v1/dlq/entry?source=redis&id=job-d", nil, &e)
	if e.LastError != "no group" || e.Attempts != 1 || e.Topic != "jobs" || e.Group != "" || e.Partition != partD.Part || string(e.Envelope) != string(envD) {
		t.Errorf("entry of a job without a group: %+v", e)
	}

	var res admin.DLQResult
	c.must(t, "POST", "/api/v1/dlq/replay", admin.DLQAction{Source: "redis", IDs: []string{"job-a", "job-d"}}, &res)
	if res.Replayed == nil || *res.Replayed != 2 || res.Missing != 0 || len(res.Skipped) != 0 {
		t.Fatalf("replay: %+v", res)
	}
	b.balanced(t)
	if code, body := c.call(t, "GET", "/api/v1/dlq/entry?source=redis&id=job-a", adminToken, nil); code != 404 {
		t.Errorf("entry of a replayed job: %d %s", code, body)
	}
	jobs := b.claimAll(t, "jobs", "other")
	if len(jobs) != 2 {
		t.Fatalf("claimed after the replay: %+v", jobs)
	}
	a, d := jobs["job-a"], jobs["job-d"]
	if a.Attempt != 1 || a.Group != "g-job-a" || a.Lane != "g/g-job-a" || string(a.Envelope) != string(envA) {
		t.Errorf("the replayed job is not claimed as a first attempt of its group, as it was: %+v", a)
	}
	if d.Attempt != 1 || d.Group != "" || d.Lane != "q/jobs/0" || string(d.Envelope) != string(envD) {
		t.Errorf("the replayed job without a group is not claimed from its shared lane, as it was: %+v", d)
	}
	ok, err := b.pool.Ack(context.Background(), part, queue.Done{Job: a, Result: []byte("sent")}, time.Now(), time.Hour)
	if !ok || err != nil {
		t.Fatalf("ack: %v %v", ok, err)
	}
	if ok, err = b.pool.Ack(context.Background(), partD, queue.Done{Job: d}, time.Now(), time.Hour); !ok || err != nil {
		t.Fatalf("ack: %v %v", ok, err)
	}
	b.balanced(t)
	if st, _ := b.pool.GroupStatus(context.Background(), "jobs", "g-job-a"); st.Done != 1 || st.Dead != 0 {
		t.Errorf("the group after the replay ran: %+v", st)
	}
	if n := b.stage(t, "jobs", queue.MilestoneCompleted); n != 2 {
		t.Errorf("completed counted %d after both replays ran, want 2", n)
	}

	c.must(t, "POST", "/api/v1/dlq/purge", admin.DLQAction{Source: "redis", IDs: []string{"job-b"}}, &res)
	if res.Purged == nil || *res.Purged != 1 {
		t.Errorf("purge: %+v", res)
	}
	if qb := b.layout.QueueOf("jobs", "g-job-b", ""); b.redis.Client().Exists(context.Background(), b.layout.Keys(qb).Job("job-b")).Val() != 0 {
		t.Error("the purged job's hash is still there")
	}
	code, body := c.call(t, "POST", "/api/v1/dlq/replay", adminToken, admin.DLQAction{Source: "redis", IDs: []string{"job-b", "job-c"}})
	if code != 409 || !strings.Contains(string(body), "1 of the named") {
		t.Errorf("a replay of a purged and a dead job: %d %s", code, body)
	}
	code, body = c.call(t, "GET", "/api/v1/dlq/entry?source=redis&id=job-b", adminToken, nil)
	if code != 404 {
		t.Errorf("entry of a purged job: %d %s", code, body)
	}
	c.must(t, "POST", "/api/v1/dlq/purge", admin.DLQAction{Source: "redis", All: true}, &res)
	c.must(t, "GET", "/api/v1/dlq?source=redis", nil, &list)
	if len(list.Entries) != 0 {
		t.Errorf("after purging all: %+v", list.Entries)
	}
	for _, bad := range []admin.DLQAction{{Source: "redis"}, {Source: "mongo", All: true}, {Source: "redis", All: true, IDs: []string{"x"}}} {
		if code, body := c.call(t, "POST", "/api/v1/dlq/replay", adminToken, bad); code != 400 {
			t.Errorf("replay %+v: %d %s, want 400", bad, code, body)
		}
	}
}

// TestAdminKafkaDLQReplayReachesTheTopic: the relay's <topic>.dlq lists
// oldest first with the reason; a replay of a record that is not the
// oldest is refused before anything happens; a replay of the oldest
// produces its key and value to the topic (murmur2 by key) and deletes it
// from the DLQ (DeleteRecords); a purge of all empties it.
func TestAdminKafkaDLQReplayReachesTheTopic(t *testing.T) {
	k := testenv.Kafka(t, testenv.Topic("jobs", 4), testenv.Topic("jobs.dlq", 1))
	b := newBed(t, 2)
	c := b.start(t, "c1", func(c *console.Config) { c.Kafka.Brokers = k.Brokers() })
	kc := kafka.Config{Brokers: k.Brokers(), Version: "3.6.0", Compression: "none", ClientID: "test"}
	prod, err := kafka.NewProducer(&kc, kafka.ProducerOptions{}, slog.New(slog.NewTextHandler(testWriter{t, "producer"}, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	var msgs []kafka.Message
	for i := range 3 {
		msgs = append(msgs, kafka.Message{Topic: "jobs.dlq", Key: []byte(fmt.Sprintf("group-%d", i)), Value: []byte(fmt.Sprintf(`{"bad":%d`, i)), Partition: 0,
			Headers: []sarama.RecordHeader{{Key: []byte("sluice-dlq-reason"), Value: []byte("envelope: unexpected end of JSON input")}, {Key: []byte("sluice-source"), Value: []byte(fmt.Sprintf("jobs/1/%d", i))}, {Key: []byte("trace"), Value: []byte("t1")}}})
	}
	if res, err := prod.Produce(context.Background(), kafka.AcksAll, msgs); err != nil || res[2].Err != nil {
		t.Fatal(res, err)
	}

	var list admin.DLQList
	c.must(t, "GET", "/api/v1/dlq?source=kafka&topic=jobs&limit=2", nil, &list)
	if len(list.Entries) != 2 || list.Entries[0].ID != "0:0" || list.Entries[1].ID != "0:1" || list.NextCursor != "0:2" ||
		list.Entries[0].Reason != "envelope: unexpected end of JSON input" || list.Entries[0].Key != "group-0" || list.Entries[0].SourceRecord != "jobs/1/0" {
		t.Fatalf("first page: %+v", list)
	}
	c.must(t, "GET", "/api/v1/dlq?source=kafka&topic=jobs&cursor="+list.NextCursor, nil, &list)
	if len(list.Entries) != 1 || list.Entries[0].ID != "0:2" || list.NextCursor != "" {
		t.Fatalf("second page: %+v", list)
	}
	var e admin.DLQEntry
	c.must(t, "GET", "/api/v1/dlq/entry?source=kafka&topic=jobs&id=0:1", nil, &e)
	if e.Value != `{"bad":1` || e.Headers["trace"] != "t1" {
		t.Errorf("entry 0:1: %+v", e)
	}

	code, body := c.call(t, "POST", "/api/v1/dlq/replay", adminToken, admin.DLQAction{Source: "kafka", Topic: "jobs", IDs: []string{"0:1"}})
	if code != 400 || !strings.Contains(string(body), "oldest") {
		t.Fatalf("replaying 0:1 before 0:0: %d %s", code, body)
	}
	var res admin.DLQResult
	c.must(t, "POST", "/api/v1/dlq/replay", admin.DLQAction{Source: "kafka", Topic: "jobs", IDs: []string{"0:0"}}, &res)
	if res.Replayed == nil || *res.Replayed != 1 {
		t.Fatalf("replay: %+v", res)
	}
	// It reached the topic, in the partition the gate's partitioner picks
	// for its key, without the relay's headers.
	want := sarama.NewMurmur2Partitioner("jobs")
	p, _ := want.Partition(&sarama.ProducerMessage{Key: sarama.StringEncoder("group-0")}, 4)
	got := readOne(t, k.Brokers(), "jobs", p)
	if string(got.Value) != `{"bad":0` || string(got.Key) != "group-0" || len(got.Headers) != 1 || string(got.Headers[0].Key) != "trace" {
		t.Errorf("replayed record: key %s value %s headers %d", got.Key, got.Value, len(got.Headers))
	}
	c.must(t, "GET", "/api/v1/dlq?source=kafka&topic=jobs", nil, &list)
	if len(list.Entries) != 2 || list.Entries[0].ID != "0:1" {
		t.Errorf("after the replay the DLQ holds %+v", list.Entries)
	}
	if n := b.stage(t, "jobs", queue.MilestoneDLQReplayed); n != 1 {
		t.Errorf("dlq_replayed counted %d", n)
	}
	c.must(t, "POST", "/api/v1/dlq/purge", admin.DLQAction{Source: "kafka", Topic: "jobs", All: true}, &res)
	if res.Purged == nil || *res.Purged != 2 {
		t.Errorf("purge all: %+v", res)
	}
	c.must(t, "GET", "/api/v1/dlq?source=kafka&topic=jobs", nil, &list)
	if len(list.Entries) != 0 {
		t.Errorf("after purging all: %+v", list.Entries)
	}
	if code, body := c.call(t, "GET", "/api/v1/dlq?source=kafka&topic=nope", adminToken, nil); code != 404 {
		t.Errorf("an unknown topic: %d %s", code, body)
	}

	// Kafka down: 503 naming the setting and the brokers.
	k.Stop()
	code, body = c.call(t, "GET", "/api/v1/dlq?source=kafka&topic=jobs", adminToken, nil)
	if e := apiError(t, body); code != 503 || !strings.Contains(e.Fix, "Config.Kafka.Brokers") || !strings.Contains(e.Fix, k.Brokers()[0]) {
		t.Errorf("with Kafka down: %d %s", code, body)
	}

	// Without brokers: 503 naming the setting.
	nok := b.start(t, "c2", nil)
	code, body = nok.call(t, "GET", "/api/v1/dlq?source=kafka&topic=jobs", adminToken, nil)
	if e := apiError(t, body); code != 503 || !strings.Contains(e.Fix, "Config.Kafka.Brokers") {
		t.Errorf("without Kafka: %d %s", code, body)
	}
}

func (b *bed) stage(t *testing.T, topic, stage string) int64 {
	t.Helper()
	var n int64
	for p := range b.layout.Partitions {
		f, err := b.pool.Funnel(context.Background(), queue.Queue{Topic: topic, Part: p})
		if err != nil {
			t.Fatal(err)
		}
		n += f.Milestones[topic][stage]
	}
	return n
}

// readOne reads the first record of topic's partition p.
func readOne(t *testing.T, brokers []string, topic string, p int32) *sarama.ConsumerMessage {
	t.Helper()
	c, err := sarama.NewConsumer(brokers, sarama.NewConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pc, err := c.ConsumePartition(topic, p, sarama.OffsetOldest)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	select {
	case m := <-pc.Messages():
		return m
	case <-time.After(20 * time.Second):
		t.Fatalf("no record in %s/%d", topic, p)
	}
	return nil
}

// TestAdminRatePauseResumeRestoresTheRate: set, pause (the relay's parser
// reads it as paused, with the rate kept), resume (the rate is back), and
// unlimited (the key goes); values the relay would refuse are a 400.
func TestAdminRatePauseResumeRestoresTheRate(t *testing.T) {
	b := newBed(t, 2)
	c := b.start(t, "c1", nil)
	kv := b.consul.Client().KV()
	value := func() string {
		p, _, err := kv.Get("sluice/test/relay/jobs/rate", nil)
		if err != nil {
			t.Fatal(err)
		}
		if p == nil {
			return ""
		}
		return string(p.Value)
	}
	var st admin.RateState
	c.must(t, "GET", "/api/v1/rates/jobs", nil, &st)
	if !st.Unlimited {
		t.Errorf("no key: %+v", st)
	}
	c.must(t, "PUT", "/api/v1/rates/jobs", admin.RateSet{Rate: 50, Burst: 100}, &st)
	if st.Rate != 50 || st.Burst != 100 || st.Paused || value() != `{"rate":50,"burst":100}` {
		t.Errorf("set: %+v %s", st, value())
	}
	c.must(t, "POST", "/api/v1/rates/jobs/pause", nil, &st)
	r, err := limits.ParseRate([]byte(value()))
	if err != nil || !r.Paused || r.PerSecond != 50 || !st.Paused || st.Rate != 50 {
		t.Errorf("paused: %+v, Consul %s reads as %+v %v", st, value(), r, err)
	}
	c.must(t, "POST", "/api/v1/rates/jobs/pause", nil, &st) // twice: no change
	c.must(t, "POST", "/api/v1/rates/jobs/resume", nil, &st)
	if st.Paused || st.Rate != 50 || st.Burst != 100 || value() != `{"rate":50,"burst":100}` {
		t.Errorf("resumed: %+v %s", st, value())
	}
	var list admin.RateList
	c.must(t, "GET", "/api/v1/rates", nil, &list)
	if len(list.Rates) != 1 || list.Rates[0].Topic != "jobs" {
		t.Errorf("list: %+v", list)
	}
	c.must(t, "PUT", "/api/v1/rates/jobs", admin.RateSet{Unlimited: true}, &st)
	if !st.Unlimited || value() != "" {
		t.Errorf("unlimited: %+v %q", st, value())
	}
	// Pausing an unlimited topic resumes to unlimited.
	c.must(t, "POST", "/api/v1/rates/jobs/pause", nil, &st)
	c.must(t, "POST", "/api/v1/rates/jobs/resume", nil, &st)
	if !st.Unlimited || value() != "" {
		t.Errorf("resumed from unlimited: %+v %q", st, value())
	}
	for _, bad := range []string{`{"rate":0}`, `{"rate":-1}`, `{"rate":5,"unlimited":true}`, `{"rate":"fast"}`, `{"rat":5}`, ``} {
		req, _ := http.NewRequest("PUT", "http://"+c.addr+"/api/v1/rates/jobs", strings.NewReader(bad))
		req.Header.Set("Authorization", "Bearer "+adminToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 400 {
			t.Errorf("PUT %s: %d, want 400", bad, resp.StatusCode)
		}
	}
}

// TestAdminLimits: set, read, list, unset; a value the workers would
// refuse is a 400.
func TestAdminLimits(t *testing.T) {
	b := newBed(t, 2)
	c := b.start(t, "c1", nil)
	if code, _ := c.call(t, "GET", "/api/v1/limits/smtp", adminToken, nil); code != 404 {
		t.Errorf("no limit: %d", code)
	}
	var st admin.LimitState
	c.must(t, "PUT", "/api/v1/limits/smtp", admin.LimitState{Rate: 10, Burst: 2}, &st)
	p, _, err := b.consul.Client().KV().Get("sluice/test/limits/smtp", nil)
	if err != nil || p == nil {
		t.Fatal(p, err)
	}
	if l, err := limits.ParseLimit(p.Value); err != nil || l.PerSecond != 10 || l.Burst != 2 {
		t.Errorf("Consul holds %s: %+v %v", p.Value, l, err)
	}
	c.must(t, "GET", "/api/v1/limits/smtp", nil, &st)
	var list admin.LimitList
	c.must(t, "GET", "/api/v1/limits", nil, &list)
	if st.Rate != 10 || len(list.Limits) != 1 || list.Limits[0].Resource != "smtp" {
		t.Errorf("get %+v, list %+v", st, list)
	}
	if code, _ := c.call(t, "PUT", "/api/v1/limits/smtp", adminToken, admin.LimitState{Rate: 2e6}); code != 400 {
		t.Errorf("a rate over the maximum: %d", code)
	}
	c.must(t, "DELETE", "/api/v1/limits/smtp", nil, nil)
	if code, _ := c.call(t, "GET", "/api/v1/limits/smtp", adminToken, nil); code != 404 {
		t.Errorf("after unset: %d", code)
	}
}

// TestAdminGroupsAndPartitions: a bulk group shows with its progress and
// its lane among the active lanes, beside the shared lanes of jobs without
// a group (per topic, or per tenant); it can be read and cancelled, its
// running job finishing it; the partitions show the depth and the jobs in
// flight; an unknown group is a 404.
func TestAdminGroupsAndPartitions(t *testing.T) {
	b := newBed(t, 2)
	c := b.start(t, "c1", nil)
	ctx := context.Background()
	var items []queue.Item
	for i := range 4 {
		id := job.BulkID("news", int64(i))
		items = append(items, queue.Item{ID: id, Group: "news", Topic: "jobs", Weight: 1, GroupTotal: 4, Envelope: []byte(`{"id":"` + id + `"}`)})
	}
	items = append(items, queue.Item{Close: true, Group: "news", Topic: "jobs", GroupTotal: 4})
	if _, err := b.pool.Enqueue(ctx, 1, items, time.Now()); err != nil {
		t.Fatal(err)
	}
	q := b.layout.QueueOf("jobs", "news", "")
	part := q.Part
	jobs, err := b.pool.Claim(ctx, q, 2, time.Minute)
	if err != nil || len(jobs) != 2 {
		t.Fatal(jobs, err)
	}
	if ok, err := b.pool.Ack(ctx, q, queue.Done{Job: jobs[0]}, time.Now(), time.Hour); !ok || err != nil {
		t.Fatal(ok, err)
	}
	running := jobs[1]
	// Jobs without a group: on their partition's shared lane of the topic
	// and priority, or of their tenant.
	type lane struct {
		part  int
		name  string
		group string
	}
	want := map[lane]int64{{part, "g/news", "news"}: 2}
	ready := map[int]int64{part: 2}
	for _, it := range []queue.Item{
		{ID: "solo-1", Topic: "jobs", Weight: 1},
		{ID: "solo-2", Topic: "jobs", Weight: 1},
		{ID: "acme-1", Topic: "jobs", Tenant: "acme", Weight: 2},
	} {
		it.Envelope = []byte(`{"id":"` + it.ID + `"}`)
		if _, err := b.pool.Enqueue(ctx, 1, []queue.Item{it}, time.Now()); err != nil {
			t.Fatal(err)
		}
		p := b.layout.PartitionOfJob("", it.ID)
		want[lane{p, queue.LaneOf("", it.Tenant, "jobs", it.Weight-1), ""}]++
		ready[p]++
	}
	var list admin.GroupList
	c.must(t, "GET", "/api/v1/groups", nil, &list)
	got := map[lane]int64{}
	for _, a := range list.Active {
		got[lane{a.Partition, a.Lane, a.Group}] = a.Ready
		if a.Topic != "jobs" {
			t.Errorf("active lane %+v: topic %q, want jobs", a.ActiveGroup, a.Topic)
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("active lanes: %+v, want %v", list.Active, want)
	}
	if len(list.Bulk) != 1 || list.Bulk[0].Total != 4 || list.Bulk[0].Done != 1 || list.Bulk[0].Running != 1 || list.Bulk[0].Progress == nil || *list.Bulk[0].Progress != 0.25 || list.Bulk[0].Topic != "jobs" {
		t.Errorf("bulk: %+v", list.Bulk)
	}
	var parts admin.PartitionList
	c.must(t, "GET", "/api/v1/partitions", nil, &parts)
	if len(parts.Partitions) != 2 || parts.Partitions[part].Completed != 1 || parts.Partitions[part].Inflight != 1 {
		t.Errorf("partitions: %+v", parts)
	}
	// Each partition shows its queue of the one topic, with the same
	// counts as the partition.
	for _, p := range parts.Partitions {
		if len(p.Queues) != 1 || p.Queues[0].Topic != "jobs" || p.Queues[0].Ready != p.Ready || p.Queues[0].Inflight != p.Inflight {
			t.Errorf("partition %d's queues: %+v", p.Partition.Partition, p.Queues)
		}
	}
	for _, p := range parts.Partitions {
		lanes := int64(0)
		for l := range want {
			if l.part == p.Partition.Partition {
				lanes++
			}
		}
		if n := p.Partition.Partition; p.Ready != ready[n] || p.ActiveGroups != lanes {
			t.Errorf("partition %d: ready %d, %d active lanes; want %d, %d", n, p.Ready, p.ActiveGroups, ready[n], lanes)
		}
	}
	var cancel admin.CancelResult
	c.must(t, "POST", "/api/v1/groups/news/cancel", nil, &cancel)
	if cancel.Removed != 2 {
		t.Errorf("cancel: %+v", cancel)
	}
	var g admin.GroupInfo
	c.must(t, "GET", "/api/v1/groups/news", nil, &g)
	if g.Cancelled != 2 || g.CancelledAt == nil || g.CompletedAt != nil || g.Running != 1 || g.Topic != "jobs" || g.Partition != part {
		t.Errorf("after cancel, a job still running: %+v", g)
	}
	if ok, err := b.pool.Ack(ctx, q, queue.Done{Job: running}, time.Now(), time.Hour); !ok || err != nil {
		t.Fatal(ok, err)
	}
	c.must(t, "GET", "/api/v1/groups/news", nil, &g)
	if g.Done != 2 || g.Cancelled != 2 || g.CompletedAt == nil || g.Progress == nil || *g.Progress != 1 {
		t.Errorf("after its running job ended: %+v", g)
	}
	c.must(t, "GET", "/api/v1/groups", nil, &list)
	for _, a := range list.Active {
		if a.Group == "news" {
			t.Errorf("the cancelled group is still active: %+v", a)
		}
	}
	if code, _ := c.call(t, "POST", "/api/v1/groups/nope/cancel", adminToken, nil); code != 404 {
		t.Errorf("cancel of an unknown group: %d", code)
	}
	var stats funnel.Report
	c.must(t, "GET", "/api/v1/stats", nil, &stats)
	if len(stats.Problems) != 0 || len(stats.Topics) != 1 {
		t.Errorf("stats: %+v", stats)
	}
	var can admin.CanaryState
	c.must(t, "GET", "/api/v1/canary", nil, &can)
	if can.Monitor || len(can.Paths) != 0 {
		t.Errorf("canary without a monitor: %+v", can)
	}
}

// TestAdminScalePins: a pin goes to Consul where the coordinators read it
// (internal/scaling), shows on the partition with its author, and auto
// removes it; a console without a coordinator in its process says it does
// not hold the lock, knows no target, and shows the parameters from Consul
// over the defaults, saying so. (A coordinator honouring the pin:
// coordinator's TestScalerHonoursAPin; a console in a coordinator's
// process: sluice's TestCoordinatorServesTheConsoleUnlessTold.)
func TestAdminScalePins(t *testing.T) {
	b := newBed(t, 2)
	c := b.start(t, "c1", nil)
	kv := b.consul.Client().KV()
	var sp admin.ScalePartition
	c.must(t, "PUT", "/api/v1/scale/0", admin.ScaleSet{Workers: 3}, &sp)
	if sp.Pin == nil || sp.Pin.Workers != 3 || sp.Target != nil {
		t.Fatalf("pin: %+v", sp)
	}
	prefix, _ := scaling.PinsPrefix("test")
	pair, _, err := kv.Get(prefix+"0", nil)
	if err != nil || pair == nil {
		t.Fatal(pair, err)
	}
	if pin, err := scaling.ParsePin(pair.Value); err != nil || pin.Workers != 3 || !strings.Contains(pin.By, "admin") {
		t.Errorf("Consul holds %s: %+v %v", pair.Value, pin, err)
	}
	var list admin.ScaleList
	c.must(t, "GET", "/api/v1/scale", nil, &list)
	if p := list.Partitions[0]; list.Holder || p.Target != nil || p.Pin == nil || p.Pin.Workers != 3 || list.Partitions[1].Pin != nil {
		t.Errorf("scale show: holder %v %+v", list.Holder, list.Partitions)
	}
	if def := scaling.DefaultParams().Wire(); list.Params != def || list.ParamsFrom != admin.ParamsFromConsul {
		t.Errorf("parameters without a coordinator or a Consul value: %+v from %q, want the defaults %+v from consul", list.Params, list.ParamsFrom, def)
	}
	if _, err := kv.Put(&consulapi.KVPair{Key: "sluice/test/scaling", Value: []byte(`{"threshold": 5, "base": 2}`)}, nil); err != nil {
		t.Fatal(err)
	}
	c.must(t, "GET", "/api/v1/scale", nil, &list)
	if p := list.Params; p.Threshold != 5 || p.Base != 2 || p.Max != 16 || p.Cycles != 3 {
		t.Errorf("parameters from Consul: %+v", p)
	}
	var parts admin.PartitionList
	c.must(t, "GET", "/api/v1/partitions", nil, &parts)
	if parts.Holder || parts.Partitions[0].Pin == nil || parts.Partitions[0].Pin.Workers != 3 || parts.Partitions[0].Target != nil {
		t.Errorf("partitions: %+v", parts)
	}
	c.must(t, "PUT", "/api/v1/scale/0", admin.ScaleSet{Auto: true}, &sp)
	if sp.Pin != nil {
		t.Errorf("auto left %+v", sp.Pin)
	}
	if pair, _, _ := kv.Get(prefix+"0", nil); pair != nil {
		t.Errorf("auto left the key: %s", pair.Value)
	}
	for _, bad := range []admin.ScaleSet{{}, {Workers: -1}, {Workers: 20000}, {Workers: 2, Auto: true}} {
		if code, body := c.call(t, "PUT", "/api/v1/scale/0", adminToken, bad); code != 400 {
			t.Errorf("PUT scale %+v: %d %s", bad, code, body)
		}
	}
	if code, _ := c.call(t, "PUT", "/api/v1/scale/9", adminToken, admin.ScaleSet{Workers: 2}); code != 400 {
		t.Errorf("an unknown partition: %d", code)
	}
}

// fakeCoordinator is a coordinator in the console's process, as the
// console sees it.
type fakeCoordinator struct {
	holds  bool
	params scaling.Params
}

func (f fakeCoordinator) Holds() bool               { return f.holds }
func (f fakeCoordinator) Target(part int) int       { return 4 + part }
func (f fakeCoordinator) Params() scaling.Params    { return f.params }
func (f fakeCoordinator) Pin(int) (admin.Pin, bool) { return admin.Pin{}, false }

// TestAdminShowsTheCoordinatorInItsProcess: with Config.Coordinator the
// console shows whether it holds the lock, its targets (only while it
// holds it) and the parameters in force in it.
func TestAdminShowsTheCoordinatorInItsProcess(t *testing.T) {
	b := newBed(t, 2)
	p := scaling.Params{Threshold: 7, Cycles: 1, Base: 3, MaxFactor: 2, HalfLife: time.Minute}
	holder := b.start(t, "holder", func(c *console.Config) { c.Coordinator = fakeCoordinator{holds: true, params: p} })
	standby := b.start(t, "standby", func(c *console.Config) { c.Coordinator = fakeCoordinator{params: p} })
	var list admin.ScaleList
	holder.must(t, "GET", "/api/v1/scale", nil, &list)
	if !list.Holder || list.Params != p.Wire() || list.ParamsFrom != admin.ParamsFromCoordinator ||
		list.Partitions[1].Target == nil || *list.Partitions[1].Target != 5 {
		t.Errorf("the holder's console: %+v", list)
	}
	standby.must(t, "GET", "/api/v1/scale", nil, &list)
	if list.Holder || list.Params != p.Wire() || list.Partitions[1].Target != nil {
		t.Errorf("the standby's console: %+v", list)
	}
	var parts admin.PartitionList
	holder.must(t, "GET", "/api/v1/partitions", nil, &parts)
	if !parts.Holder || parts.Partitions[0].Target == nil || *parts.Partitions[0].Target != 4 {
		t.Errorf("the holder's partitions: %+v", parts)
	}
}

// TestAdminUnreachableStores: with Redis down the Redis-backed endpoints
// answer 503 naming Config.RedisAddr; with Consul down the Consul-backed
// ones name Config.ConsulAddr.
func TestAdminUnreachableStores(t *testing.T) {
	b := newBed(t, 2)
	c := b.start(t, "c1", nil)
	b.consul.Stop()
	code, body := c.call(t, "GET", "/api/v1/rates/jobs", adminToken, nil)
	if e := apiError(t, body); code != 503 || !strings.Contains(e.Fix, "Config.ConsulAddr") {
		t.Errorf("Consul down: %d %s", code, body)
	}
	b.redis.Stop()
	for _, path := range []string{"/api/v1/partitions", "/api/v1/stats", "/api/v1/dlq?source=redis", "/api/v1/groups"} {
		code, body := c.call(t, "GET", path, adminToken, nil)
		if e := apiError(t, body); code != 503 || !strings.Contains(e.Fix, "Config.RedisAddr") {
			t.Errorf("%s with Redis down: %d %s", path, code, body)
		}
	}
}
