package relay_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"

	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/kafka"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/internal/topics"
)

// TestRelayFollowsTheTopicList: a running relay takes up a topic added to
// the stage's list in Consul (what sluice topics create writes) without a
// restart: it registers it and relays its jobs into Redis; its --topics
// topic keeps flowing; a topic taken off the list is let go (its lock
// released); a listed topic missing from Kafka is retried, never fatal.
func TestRelayFollowsTheTopicList(t *testing.T) {
	b := newBed(t)
	r := b.start(t, "r", nil)
	ctx := context.Background()
	kv := b.consul.Client().KV()
	put := func(name string) {
		t.Helper()
		key, err := topics.Key(b.layout.Stage, name)
		if err != nil {
			t.Fatal(err)
		}
		v, _ := json.Marshal(topics.Spec{Partitions: 2, Replication: 1, Created: time.Now()})
		if _, err := kv.Put(&consulapi.KVPair{Key: key, Value: v}, nil); err != nil {
			t.Fatal(err)
		}
	}
	// Listed before Kafka has it: the relay keeps trying, and lives.
	put("ghost")
	b.kafka.CreateTopic("mail", 2)
	b.kafka.CreateTopic("mail.dlq", 1)
	put("mail")

	testenv.WaitFor(t, 15*time.Second, "the relay to hold mail's lock", func() bool { return r.relay.Holds("mail") })
	env := job.Job{ID: "m1", Topic: "mail", Type: "t", Payload: []byte(`{}`), EnqueuedAt: time.Now()}
	b.produceRaw(t, []kafka.Message{{Topic: "mail", Key: []byte("m1"), Value: env.AppendJSON(nil), Partition: -1}})
	q := b.layout.QueueOf("mail", "", "m1")
	pool, err := queue.NewPool(queue.PoolConfig{Keyspace: b.layout, Addr: b.redis.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	testenv.WaitFor(t, 15*time.Second, "mail's job in Redis", func() bool {
		f, err := pool.Funnel(ctx, q)
		return err == nil && f.Ready == 1
	})
	if names, err := pool.Topics(ctx); err != nil || !slices.Contains(names, "mail") || slices.Contains(names, "ghost") {
		t.Errorf("registered topics: %v %v; want mail (relayed) and not ghost (no Kafka topic)", names, err)
	}
	// The flag's topic is relayed as before.
	b.produce(t, 0, 5)
	b.waitCount(t, 5, 15*time.Second)

	// Off the list: let go.
	key, _ := topics.Key(b.layout.Stage, "mail")
	if _, err := kv.Delete(key, nil); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 15*time.Second, "the relay to let mail go", func() bool { return !r.relay.Holds("mail") })
	if !r.relay.Holds(topic) {
		t.Errorf("the --topics topic %s was let go too", topic)
	}
	select {
	case err := <-r.done:
		t.Fatalf("the relay stopped: %v", err)
	default:
	}
}
