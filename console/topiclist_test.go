package console_test

import (
	"context"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/sluicehq/sluice/console"
	"github.com/sluicehq/sluice/internal/admin"
	"github.com/sluicehq/sluice/internal/kafka"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/internal/topics"
)

// kafkaTopics are the topics Kafka has now.
func kafkaTopics(t *testing.T, brokers []string) []string {
	t.Helper()
	c, err := sarama.NewClient(brokers, sarama.NewConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	names, err := c.Topics()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	return names
}

// TestAdminTopicsCreateDescribeDelete: POST /api/v1/topics creates the
// topic with its .retry and .dlq in Kafka and lists it in Consul; a second
// create is a 409, bad names and sizes are 400s naming the flag; ls and
// describe show it with its problems (no relay yet) and its queue; delete
// refuses while jobs wait in Kafka and a topic outside the list, and with
// force takes it out of the list, Kafka and the registry.
func TestAdminTopicsCreateDescribeDelete(t *testing.T) {
	k := testenv.Kafka(t)
	b := newBed(t, 2)
	c := b.start(t, "c1", func(c *console.Config) { c.Kafka.Brokers = k.Brokers() })

	var created admin.TopicCreated
	c.must(t, "POST", "/api/v1/topics", admin.TopicCreate{Name: "mail", Partitions: 4}, &created)
	if !slices.Equal(created.CreatedKafka, []string{"mail", "mail.retry", "mail.dlq"}) || created.Partitions != 4 || created.Replication != 1 || !created.Listed {
		t.Fatalf("created: %+v", created)
	}
	if got := kafkaTopics(t, k.Brokers()); !slices.Contains(got, "mail") || !slices.Contains(got, "mail.retry") || !slices.Contains(got, "mail.dlq") {
		t.Fatalf("Kafka topics after create: %v", got)
	}
	key, _ := topics.Key("test", "mail")
	pair, _, err := b.consul.Client().KV().Get(key, nil)
	if err != nil || pair == nil {
		t.Fatalf("the list's key %s: %v %v", key, pair, err)
	}
	if s, err := topics.Parse(pair.Value); err != nil || s.Partitions != 4 || s.Replication != 1 {
		t.Fatalf("the list's value %s: %+v %v", pair.Value, s, err)
	}

	for _, bad := range []struct {
		body   admin.TopicCreate
		status int
		want   string
	}{
		{admin.TopicCreate{Name: "mail"}, http.StatusConflict, "exists already"},
		{admin.TopicCreate{Name: "mail.dlq"}, http.StatusBadRequest, "relay's and Kafka's own"},
		{admin.TopicCreate{Name: "a/b"}, http.StatusBadRequest, "letters, digits"},
		{admin.TopicCreate{Name: "big", Partitions: 5000}, http.StatusBadRequest, "--partitions"},
		{admin.TopicCreate{Name: "safe", Replication: 3}, http.StatusBadRequest, "--replication 1"},
	} {
		code, body := c.call(t, "POST", "/api/v1/topics", adminToken, bad.body)
		if code != bad.status || !strings.Contains(string(body), bad.want) {
			t.Errorf("create %+v: %d %s, want %d with %q", bad.body, code, body, bad.status, bad.want)
		}
	}
	if code, body := c.call(t, "POST", "/api/v1/topics", readToken, admin.TopicCreate{Name: "other"}); code != http.StatusForbidden {
		t.Errorf("create with a read token: %d %s", code, body)
	}
	if slices.Contains(kafkaTopics(t, k.Brokers()), "big") || slices.Contains(kafkaTopics(t, k.Brokers()), "safe") {
		t.Error("a refused create left a Kafka topic behind")
	}

	var list admin.TopicList
	c.must(t, "GET", "/api/v1/topics", nil, &list)
	var names []string
	for _, st := range list.Topics {
		names = append(names, st.Name)
		if st.Name == "mail" && (!st.Listed || st.Partitions != 4 || len(st.Problems) != 1 || !strings.Contains(st.Problems[0], "no relay holds its lock")) {
			t.Errorf("mail in ls: %+v", st)
		}
		if st.Name == "jobs" && (st.Listed || !st.Registered || len(st.Problems) < 2) {
			t.Errorf("jobs (registered by a relay, not listed, not in Kafka) in ls: %+v", st)
		}
	}
	if !slices.Equal(names, []string{"jobs", "mail"}) {
		t.Errorf("ls: %v", names)
	}
	var st admin.TopicState
	c.must(t, "GET", "/api/v1/topics/mail", nil, &st)
	if st.Queue == nil || st.Queue.Topic != "mail" || !slices.Equal(st.Kafka, []string{"mail", "mail.retry", "mail.dlq"}) {
		t.Errorf("describe mail: %+v", st)
	}
	if code, body := c.call(t, "GET", "/api/v1/topics/nope", adminToken, nil); code != http.StatusNotFound || !strings.Contains(string(body), "sluice topics create nope") {
		t.Errorf("describe an unknown topic: %d %s", code, body)
	}

	// A job waits in Kafka: delete refuses, naming it.
	kc := kafka.Config{Brokers: k.Brokers(), Version: "3.6.0", Compression: "none", ClientID: "test"}
	prod, err := kafka.NewProducer(&kc, kafka.ProducerOptions{}, slog.New(slog.NewTextHandler(testWriter{t, "producer"}, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	if res, err := prod.Produce(context.Background(), kafka.AcksAll, []kafka.Message{{Topic: "mail", Value: []byte(`{"id":"m1","type":"t"}`), Partition: -1}}); err != nil || res[0].Err != nil {
		t.Fatal(res, err)
	}
	code, body := c.call(t, "DELETE", "/api/v1/topics/mail", adminToken, nil)
	if e := apiError(t, body); code != http.StatusConflict || !strings.Contains(e.Message, "1 in Kafka not yet relayed") || !strings.Contains(e.Fix, "--force") {
		t.Fatalf("delete with a job in Kafka: %d %s", code, body)
	}
	if !slices.Contains(kafkaTopics(t, k.Brokers()), "mail") {
		t.Fatal("a refused delete deleted the Kafka topic")
	}
	// A topic outside the list is a relay's --topics: refused too.
	code, body = c.call(t, "DELETE", "/api/v1/topics/jobs", adminToken, nil)
	if e := apiError(t, body); code != http.StatusConflict || !strings.Contains(e.Message, "not in the stage's topic list") {
		t.Errorf("delete of a topic outside the list: %d %s", code, body)
	}

	var deleted admin.TopicDeleted
	c.must(t, "DELETE", "/api/v1/topics/mail?force=true", nil, &deleted)
	if !deleted.Unlisted || !slices.Equal(deleted.DeletedKafka, []string{"mail", "mail.retry", "mail.dlq"}) {
		t.Fatalf("forced delete: %+v", deleted)
	}
	if pair, _, err := b.consul.Client().KV().Get(key, nil); err != nil || pair != nil {
		t.Errorf("the list's key after delete: %v %v", pair, err)
	}
	testenv.WaitFor(t, 10*time.Second, "Kafka to drop the deleted topics", func() bool {
		got := kafkaTopics(t, k.Brokers())
		return !slices.Contains(got, "mail") && !slices.Contains(got, "mail.dlq") && !slices.Contains(got, "mail.retry")
	})
	if code, body := c.call(t, "GET", "/api/v1/topics/mail", adminToken, nil); code != http.StatusNotFound {
		t.Errorf("describe after delete: %d %s", code, body)
	}
}
