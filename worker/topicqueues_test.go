package worker_test

import (
	"context"
	"errors"
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/worker"
)

// startLog records the topic of every handler start, in order.
type startLog struct {
	mu     sync.Mutex
	topics []string
	ids    []string
}

func (s *startLog) handler(work time.Duration) worker.Handler {
	return worker.HandlerFunc(func(ctx context.Context, j *worker.Job) ([]byte, error) {
		s.mu.Lock()
		s.topics = append(s.topics, j.Topic)
		s.ids = append(s.ids, j.ID)
		s.mu.Unlock()
		if work > 0 {
			time.Sleep(work)
		}
		return nil, nil
	})
}

func (s *startLog) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.topics)
}

func (s *startLog) snapshot() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.topics...)
}

// topicJobs are n jobs of topic with ids <prefix>-<i>, without a group
// (they share the topic's lane on each partition).
func topicJobs(topic, prefix string, n int) []job.Job {
	jobs := make([]job.Job, n)
	for i := range jobs {
		jobs[i] = job.Job{ID: prefix + "-" + strconv.Itoa(i), Type: "t", Topic: topic}
	}
	return jobs
}

// (a) Three topics, all backlogged, weighted 6:3:1: the first 300 jobs
// started follow the weights. The tolerance is ±12 jobs per topic: the
// choice among topics is fair at the grain of a claim (ClaimBatch 4 here:
// a topic's count may be up to a claim off its share), and starts are
// recorded by concurrent handlers (up to Workers 4 out of claim order).
// Equal shares (100 each) would be far outside it.
func TestWeightedTopicsShareStartsByWeight(t *testing.T) {
	b := newBedOf(t, 1) // one consumer: its claims are the order
	for _, topic := range []string{"critical", "default", "low"} {
		b.enqueue(t, topicJobs(topic, topic, 300)...)
	}
	s := &startLog{}
	b.start(t, func(c *worker.Config) {
		c.Topics = worker.TopicWeights{{Topic: "critical", Weight: 6}, {Topic: "default", Weight: 3}, {Topic: "low", Weight: 1}}
		c.Workers, c.ClaimBatch = 4, 4
	}, func(w *worker.Worker) { w.HandleOther(s.handler(0)) })
	const n = 300
	testenv.WaitFor(t, 30*time.Second, "300 jobs started", func() bool { return s.len() >= n })
	count := map[string]int{}
	for _, topic := range s.snapshot()[:n] {
		count[topic]++
	}
	for topic, share := range map[string]float64{"critical": 180, "default": 90, "low": 30} {
		if math.Abs(float64(count[topic])-share) > 12 {
			t.Errorf("%s: %d of the first %d starts, want %v ± 12 (6:3:1): %v", topic, count[topic], n, share, count)
		}
	}
	t.Logf("first %d starts by topic: %v (6:3:1 is 180/90/30)", n, count)
}

// (b) --strict drains the topics in order: with both backlogged, every job
// of the first topic starts before any of the second (whatever the
// weights); and once the first has work again, the second's claims stop
// within moments: the first's jobs do not wait for the second's backlog.
func TestStrictTopicsDrainInOrder(t *testing.T) {
	b := newBedOf(t, 1)
	b.enqueue(t, topicJobs("bulk", "bulk", 100)...)
	b.enqueue(t, topicJobs("urgent", "urgent", 100)...)
	s := &startLog{}
	b.start(t, func(c *worker.Config) {
		c.Topics = worker.TopicWeights{{Topic: "urgent", Weight: 1}, {Topic: "bulk", Weight: 100}}
		c.Strict = true
		c.Workers, c.Prefetch = 2, 0
	}, func(w *worker.Worker) {
		w.Handle("t", s.handler(0))
		w.Handle("slow", s.handler(5*time.Millisecond))
	})
	testenv.WaitFor(t, 30*time.Second, "200 jobs started", func() bool { return s.len() >= 200 })
	for i, topic := range s.snapshot() {
		if want := map[bool]string{true: "urgent", false: "bulk"}[i < 100]; topic != want {
			t.Fatalf("start %d was of %s, want %s: urgent must drain before any bulk job starts", i, topic, want)
		}
	}

	// A bulk backlog under way, then urgent work arrives.
	slow := make([]job.Job, 300)
	for i := range slow {
		slow[i] = job.Job{ID: "slow-" + strconv.Itoa(i), Type: "slow", Topic: "bulk"}
	}
	b.enqueue(t, slow...)
	testenv.WaitFor(t, 30*time.Second, "the bulk backlog under way", func() bool { return s.len() >= 210 })
	before := s.len()
	b.enqueue(t, topicJobs("urgent", "urgent-late", 20)...)
	testenv.WaitFor(t, 30*time.Second, "the new urgent jobs started", func() bool {
		n := 0
		for _, topic := range s.snapshot()[before:] {
			if topic == "urgent" {
				n++
			}
		}
		return n == 20
	})
	starts := s.snapshot()[before:]
	lastUrgent, bulkBetween := 0, 0
	for i, topic := range starts {
		if topic == "urgent" {
			lastUrgent = i
		}
	}
	for _, topic := range starts[:lastUrgent] {
		if topic == "bulk" {
			bulkBetween++
		}
	}
	// Slots free every ~2.5 ms (2 slots, 5 ms jobs, no prefetch), and a
	// busy consumer looks at its empty topics every 10 ms: a few bulk
	// starts, not the 290 left.
	if bulkBetween > 20 {
		t.Fatalf("%d bulk jobs started between the urgent jobs' enqueue and the last urgent start; strict order lets few through", bulkBetween)
	}
	t.Logf("%d bulk jobs started before the 20 urgent ones were all under way", bulkBetween)
}

// (c) Separate pools per topic in one stage: a worker serving only "a"
// never claims "b"'s jobs, and a second worker serving "b" runs them.
func TestAWorkerClaimsOnlyItsTopics(t *testing.T) {
	b := newBed(t)
	ctx := context.Background()
	b.enqueue(t, topicJobs("b", "b", 20)...)
	sa, sb := &startLog{}, &startLog{}
	b.start(t, func(c *worker.Config) { c.Topics = worker.TopicWeights{{Topic: "a", Weight: 1}} },
		func(w *worker.Worker) { w.HandleOther(sa.handler(0)) })
	b.enqueue(t, topicJobs("a", "a", 20)...)
	testenv.WaitFor(t, 15*time.Second, "a's 20 jobs run", func() bool { return sa.len() == 20 })
	// b's jobs are where they were: ready, none claimed.
	ready := func(topic string) (ready, inflight int) {
		for p := range b.layout.Partitions {
			st := b.layout.Keys(queue.Queue{Topic: topic, Part: p}).Stats()
			r, _ := b.redis.Client().HGet(ctx, st, "ready").Int()
			f, _ := b.redis.Client().HGet(ctx, st, "inflight").Int()
			ready, inflight = ready+r, inflight+f
		}
		return ready, inflight
	}
	if r, f := ready("b"); r != 20 || f != 0 {
		t.Fatalf("b's queues with only a worker of a running: %d ready, %d in flight; want 20, 0", r, f)
	}

	b.start(t, func(c *worker.Config) { c.Topics = worker.TopicWeights{{Topic: "b", Weight: 1}} },
		func(w *worker.Worker) { w.HandleOther(sb.handler(0)) })
	b.enqueue(t, topicJobs("a", "a-more", 10)...) // new a jobs with both running: still a's worker's
	testenv.WaitFor(t, 15*time.Second, "b's 20 jobs and a's 10 more run", func() bool { return sb.len() == 20 && sa.len() == 30 })
	for name, s := range map[string]*startLog{"a": sa, "b": sb} {
		for _, topic := range s.snapshot() {
			if topic != name {
				t.Fatalf("the worker of %s ran a job of %s", name, topic)
			}
		}
	}
	if r, f := ready("b"); r != 0 || f != 0 {
		t.Fatalf("b's queues after b's worker ran: %d ready, %d in flight", r, f)
	}
}

// (d) An idle consumer waits in one BLPOP covering its partition's command
// list and every served topic's wake list: a job on any of them starts
// promptly. Without the wake, it would start only when the idle wait runs
// out (1 s).
func TestAJobOnAnyServedTopicWakesTheIdleConsumer(t *testing.T) {
	b := newBed(t)
	started := make(chan string, 1)
	b.start(t, func(c *worker.Config) {
		c.Topics = worker.TopicWeights{{Topic: "one", Weight: 1}, {Topic: "two", Weight: 5}, {Topic: "three", Weight: 1}}
	}, func(w *worker.Worker) {
		w.HandleOther(worker.HandlerFunc(func(_ context.Context, j *worker.Job) ([]byte, error) {
			started <- j.Topic
			return nil, nil
		}))
	})
	for round, topic := range []string{"three", "one", "two", "three"} {
		// The state measured: each partition's consumer idle in its
		// one BLPOP (one blocked client per partition, whatever the
		// number of topics).
		testenv.WaitFor(t, 5*time.Second, "the consumers to block", func() bool {
			info, err := b.redis.Client().Info(context.Background(), "clients").Result()
			return err == nil && strings.Contains(info, "blocked_clients:"+strconv.Itoa(b.layout.Partitions)+"\r")
		})
		at := time.Now()
		b.enqueue(t, job.Job{ID: "wake-" + strconv.Itoa(round), Type: "t", Topic: topic})
		select {
		case got := <-started:
			if d := time.Since(at); got != topic || d > 250*time.Millisecond {
				t.Fatalf("a job of %s started (topic %s) %s after its enqueue; want it promptly, woken", topic, got, d)
			} else {
				t.Logf("%s: started %s after the enqueue", topic, d.Round(100*time.Microsecond))
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("the job of %s never started", topic)
		}
	}
}

// A job's failure, its retry's promotion from delayed and its ack go to
// its own topic's queue, here the second topic served: its record there
// says done at attempt 2, and the handler saw its topic.
func TestRetriesAndAcksGoToTheJobsQueue(t *testing.T) {
	b := newBed(t)
	var mu sync.Mutex
	attempts := map[string]int{}
	b.start(t, func(c *worker.Config) {
		c.Topics = worker.TopicWeights{{Topic: "first", Weight: 1}, {Topic: "second", Weight: 1}}
		c.Retain = map[string]time.Duration{"second": time.Hour} // keep its record, to read
	}, func(w *worker.Worker) {
		w.HandleOther(worker.HandlerFunc(func(_ context.Context, j *worker.Job) ([]byte, error) {
			mu.Lock()
			defer mu.Unlock()
			if j.Topic != "second" {
				return nil, worker.Permanent(errors.New("topic " + j.Topic))
			}
			if attempts[j.ID]++; j.Attempt == 1 {
				return nil, errors.New("first try fails")
			}
			return []byte(`"ok"`), nil
		}))
	})
	b.enqueue(t, job.Job{ID: "r1", Type: "t", Topic: "second", Group: "g"})
	k := b.layout.Keys(b.layout.QueueOf("second", "g", "r1"))
	var h map[string]string
	testenv.WaitFor(t, 15*time.Second, "r1 done on its queue", func() bool {
		h, _ = b.redis.Client().HGetAll(context.Background(), k.Job("r1")).Result()
		return h["state"] == "done"
	})
	if h["attempts"] != "2" || h["result"] != `"ok"` {
		t.Fatalf("r1's record on topic second's queue: %v; want done at attempt 2", h)
	}
	if n, _ := b.redis.Client().HGet(context.Background(), k.Stats(), "done").Int(); n != 1 {
		t.Fatalf("second's queue counts %d done, want 1", n)
	}
}

// Ids are unique within a queue, not across topics: two topics' jobs of the
// same id, held by one consumer at once for longer than a lease, each keep
// their lease, run once and are acked on their own queue (the consumer's
// held jobs are keyed by queue and id: by id alone, one would hide the
// other from the lease keeper, and the reaper would run it again).
func TestTheSameIDInTwoTopicsRunsOnceEach(t *testing.T) {
	b := newBedOf(t, 1)
	b.enqueue(t, job.Job{ID: "order-42", Type: "t", Topic: "a"}, job.Job{ID: "order-42", Type: "t", Topic: "b"})
	release := make(chan struct{})
	s := &startLog{}
	inner := s.handler(0)
	const lease = time.Second
	b.start(t, func(c *worker.Config) {
		c.Topics = worker.TopicWeights{{Topic: "a", Weight: 1}, {Topic: "b", Weight: 1}}
		c.Workers, c.Lease = 2, lease
	}, func(w *worker.Worker) {
		w.HandleOther(worker.HandlerFunc(func(ctx context.Context, j *worker.Job) ([]byte, error) {
			inner.Handle(ctx, j)
			select { // both held at once, past their first lease
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return nil, nil
		}))
	})
	testenv.WaitFor(t, 10*time.Second, "both jobs running", func() bool { return s.len() == 2 })
	held := time.Now()
	// The property is about time: the jobs outlive three leases.
	testenv.WaitFor(t, 10*time.Second, "three leases", func() bool { return time.Since(held) > 3*lease })
	close(release)
	for _, topic := range []string{"a", "b"} {
		q := queue.Queue{Topic: topic, Part: 0}
		testenv.WaitFor(t, 10*time.Second, "the job of "+topic+" acked", func() bool {
			n, _ := b.redis.Client().HGet(context.Background(), b.layout.Keys(q).Stats(), "done").Int()
			return n == 1
		})
	}
	if got := s.snapshot(); len(got) != 2 || got[0] == got[1] {
		t.Fatalf("started on topics %v, want a and b once each", got)
	}
}
