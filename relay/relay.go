package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"
	consulapi "github.com/hashicorp/consul/api"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/consul"
	"github.com/sluicehq/sluice/internal/kafka"
	"github.com/sluicehq/sluice/internal/ops"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/topics"
)

// Relay relays its topics while it runs.
type Relay struct {
	cfg      Config
	log      *slog.Logger
	pool     redisSide
	consul   *consulapi.Client
	producer *kafka.Producer // dead letters and requeues
	reg      *prometheus.Registry
	m        *metrics
	guards   map[redis.UniversalClient]*memGuard
	outage   *queue.Outage // waits on a Redis that cannot serve or write
	holder   string
	now      func() time.Time
	// idMissing holds the topics whose id Kafka did not give, once the
	// relay said so (logid.go).
	idMissing sync.Map

	mu   sync.Mutex
	held map[string]bool
}

// New connects to Kafka, Redis and Consul and checks what the relay needs:
// the topics and their DLQ topics exist, the Lua scripts load, no Redis
// evicts keys (queue.Pool.CheckEviction).
func New(ctx context.Context, cfg Config, log *slog.Logger) (*Relay, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	pcfg := cfg.PoolConfig()
	pcfg.IDDedupeTTL = cfg.IDDedupeTTL
	pool, err := openRedis(pcfg)
	if err != nil {
		return nil, err
	}
	r := &Relay{cfg: cfg, log: log, pool: pool, reg: ops.NewRegistry(), now: time.Now, held: map[string]bool{}, outage: queue.NewOutage(log, nil)}
	fail := func(err error) (*Relay, error) { r.close(); return nil, err }
	if !cfg.Shadow {
		if err := pool.LoadScripts(ctx); err != nil {
			return fail(err)
		}
		if err := pool.CheckEviction(ctx, log); err != nil {
			return fail(err)
		}
		// Readers of every queue (stats, the admin API, the coordinator,
		// the gate's group lookup) list the topics from here.
		if err := pool.RegisterTopics(ctx, cfg.Topics, time.Now()); err != nil {
			return fail(err)
		}
	}
	if r.consul, err = cfg.Config.Client("relay"); err != nil {
		return fail(err)
	}
	if r.producer, err = kafka.NewProducer(&cfg.Kafka, kafka.ProducerOptions{}, log); err != nil {
		return fail(err)
	}
	for _, t := range cfg.Topics {
		for _, need := range []string{t, kafka.DLQTopic(t)} {
			if _, err := r.producer.Client().Partitions(need); err != nil {
				return fail(fmt.Errorf("topic %s: %v (the relay needs each topic and its .dlq; create them)", need, err))
			}
		}
	}
	r.m = newMetrics(r.reg, r.outage)
	host, _ := os.Hostname()
	r.holder = fmt.Sprintf("%s/%d", host, os.Getpid())
	servers, addrs := pool.Servers()
	r.guards = map[redis.UniversalClient]*memGuard{}
	for i, c := range servers {
		r.guards[c] = newMemGuard(c, addrs[i], cfg.HighWatermark, cfg.LowWatermark, cfg.MemorySample, log,
			func(addr string, paused bool, ratio float64) {
				r.m.memPaused.WithLabelValues(addr).Set(b2f(paused))
				r.m.memRatio.WithLabelValues(addr).Set(ratio)
			})
	}
	return r, nil
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func (r *Relay) close() {
	if r.producer != nil {
		r.producer.Close()
	}
	r.pool.Close()
}

// Registry holds the relay's metrics.
func (r *Relay) Registry() *prometheus.Registry { return r.reg }

// Holds reports whether this relay holds topic's lock now.
func (r *Relay) Holds(topic string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.held[topic]
}

func (r *Relay) setHeld(topic string, held bool) {
	r.mu.Lock()
	r.held[topic] = held
	r.mu.Unlock()
	r.m.lockHeld.WithLabelValues(topic).Set(b2f(held))
}

// ready: Redis and Kafka answer. A standby is ready: it is ready to take over.
func (r *Relay) ready(ctx context.Context) error {
	if err := r.pool.Ping(ctx); err != nil {
		return err
	}
	if len(r.producer.Client().Brokers()) == 0 {
		return errors.New("no Kafka brokers")
	}
	return nil
}

// Run relays the topics until ctx ends, then hands its locks over and
// closes its clients. It serves no HTTP: Serve adds /healthz, /readyz and
// /metrics, or a program that embeds the relay mounts Registry itself.
//
// Config.Topics are served from the start, and a failure of one ends Run.
// With Config.FollowTopics, the topics of the stage's list in Consul
// (internal/topics) are served too, taken up and let go as the list
// changes; a listed topic that fails (its Kafka topic missing, say) is
// logged and tried again, never ending Run: the list is the operators',
// and one bad entry must not stop the topics that work.
func (r *Relay) Run(ctx context.Context) error {
	defer r.close()
	gctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for _, g := range r.guards {
		wg.Add(1)
		go func() { defer wg.Done(); g.Run(gctx) }()
	}
	fatal := make(chan error, len(r.cfg.Topics))
	running := map[string]context.CancelFunc{} // listed topics served, by name
	for _, topic := range r.cfg.Topics {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.runTopic(gctx, topic); err != nil && gctx.Err() == nil {
				fatal <- err
			}
		}()
	}
	var lists chan map[string]topics.Spec
	if r.cfg.FollowTopics {
		lists = make(chan map[string]topics.Spec, 1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := topics.Watch(gctx, r.consul, r.cfg.Stage, consul.WatchOptions{Log: r.log}, func(m map[string]topics.Spec) {
				// The newest list replaces one not yet taken.
				select {
				case <-lists:
				default:
				}
				lists <- m
			})
			if err != nil {
				r.log.Error("cannot follow the stage's topic list", "err", err)
			}
		}()
	}
	r.log.Info("relay running", "topics", strings.Join(r.cfg.Topics, ","), "follow_topics", r.cfg.FollowTopics, "partitions", r.cfg.Partitions,
		"stage", r.cfg.Stage, "shadow", r.cfg.Shadow, "holder", r.holder)
	var first error
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case first = <-fatal:
			break loop
		case m := <-lists:
			for topic, stop := range running {
				if _, ok := m[topic]; !ok {
					r.log.Info("topic left the stage's list: letting it go", "topic", topic)
					stop()
					delete(running, topic)
				}
			}
			for _, topic := range topics.Names(m) {
				if _, ok := running[topic]; ok || slices.Contains(r.cfg.Topics, topic) {
					continue
				}
				r.log.Info("topic joined the stage's list: relaying it", "topic", topic)
				tctx, stop := context.WithCancel(gctx)
				running[topic] = stop
				wg.Add(1)
				go func() { defer wg.Done(); r.runListed(tctx, topic) }()
			}
		}
	}
	cancel()
	wg.Wait()
	r.log.Info("relay stopped")
	return first
}

// listedRetry is how long a listed topic that failed waits before it is
// tried again.
const listedRetry = 5 * time.Second

// runListed serves a topic of the stage's list until ctx ends: it checks
// that the topic and its .dlq exist in Kafka, registers it in Redis (so
// that stats, the admin API and the coordinator read its queues), and
// relays it; a failure is logged and tried again after listedRetry.
func (r *Relay) runListed(ctx context.Context, topic string) {
	log := r.log.With("topic", topic)
	for ctx.Err() == nil {
		err := r.startListed(ctx, topic)
		if err == nil {
			err = r.runTopic(ctx, topic)
		}
		if ctx.Err() != nil {
			return
		}
		log.Error("relaying a topic of the stage's list failed; trying again", "err", err, "in", listedRetry.String(),
			"fix", "`sluice topics describe "+topic+"` shows what is missing; `sluice topics create "+topic+"` creates it")
		t := time.NewTimer(listedRetry)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

func (r *Relay) startListed(ctx context.Context, topic string) error {
	client := r.producer.Client()
	need := []string{topic, kafka.DLQTopic(topic)}
	if err := client.RefreshMetadata(need...); err != nil {
		return fmt.Errorf("Kafka metadata of %v: %w", need, err)
	}
	for _, t := range need {
		if _, err := client.Partitions(t); err != nil {
			return fmt.Errorf("topic %s: %v (the relay needs each topic and its .dlq)", t, err)
		}
	}
	if r.cfg.Shadow {
		return nil
	}
	return r.pool.RegisterTopics(ctx, []string{topic}, time.Now())
}

// Serve runs the relay (Run) until ctx ends, serving /healthz, /readyz
// and /metrics on ln meanwhile. sluice relay listens on Config.Listen.
func (r *Relay) Serve(ctx context.Context, ln net.Listener) error {
	mux := http.NewServeMux()
	ops.Mount(mux, r.reg, r.ready)
	srv := ops.NewServer(mux, r.cfg.HTTP, r.log)
	opsDone := make(chan error, 1)
	go func() { opsDone <- ops.Serve(ctx, r.log, srv, ln, time.Second) }()
	err := r.Run(ctx)
	if oerr := <-opsDone; err == nil {
		err = oerr
	}
	return err
}

// runTopic follows the topic's rate in Consul and relays the topic whenever
// it holds the topic's lock, until ctx ends.
func (r *Relay) runTopic(ctx context.Context, topic string) error {
	log := r.log.With("topic", topic)
	th := newThrottle()
	r.applyRate(topic, th, Rate{Unlimited: true})
	rateKey, err := consul.Key(r.cfg.Stage, "relay", topic, "rate")
	if err != nil {
		return err
	}
	lockKey, err := consul.Key(r.cfg.Stage, "relay", topic, "lock")
	if err != nil {
		return err
	}
	go consul.Watch(ctx, r.consul, rateKey, consul.WatchOptions{Log: log}, func(value []byte, exists bool) {
		if !exists {
			r.applyRate(topic, th, Rate{Unlimited: true})
			return
		}
		rate, err := ParseRate(value)
		if err != nil {
			// A bad value must not lift the limit: keep the last one.
			log.Error("ignoring an invalid relay rate; the last one stays in force", "key", rateKey, "err", err, "in_force", th.Current().String())
			return
		}
		r.applyRate(topic, th, rate)
	})
	lockDelay := consul.FlagLockDelay(r.cfg.LockDelay)
	lock := consul.LockConfig{
		Client:    r.consul,
		Key:       lockKey,
		Holder:    r.holder,
		TTL:       r.cfg.LockTTL,
		LockDelay: lockDelay,
		Log:       log,
	}
	return consul.Hold(ctx, lock, func(lctx context.Context, lease *consul.Lease) error {
		r.m.lockAcquired.WithLabelValues(topic).Inc()
		r.setHeld(topic, true)
		defer r.setHeld(topic, false)
		log.Info("relaying", "token", lease.Token())
		err := r.relayTopic(lctx, topic, lease, th, log)
		for errors.Is(err, errRedisRestarted) && lctx.Err() == nil {
			r.m.rewinds.WithLabelValues(topic).Inc()
			log.Warn("Redis restarted under writes not yet durable: relaying again from the committed offsets (what Redis kept is deduplicated by job id)")
			err = r.relayTopic(lctx, topic, lease, th, log)
		}
		if errors.Is(err, queue.ErrFenced) {
			log.Error("a Redis partition holds a newer lock token than this relay's: it is deposed, stops writing and gives up the lock. "+
				"If no other relay of the topic runs, Consul lost its state and restarted its LockIndex: stop every relay of the topic and "+
				"delete the topic's fences (docs/redis-layout.md, \"Fencing tokens and Consul state\")", "token", lease.Token(), "err", err)
		}
		return err
	})
}

var inf = math.Inf(1)

func (r *Relay) applyRate(topic string, th *throttle, rate Rate) {
	th.Set(rate)
	r.m.ratePaused.WithLabelValues(topic).Set(b2f(rate.Paused))
	switch {
	case rate.Paused:
		r.m.rateLimit.WithLabelValues(topic).Set(0)
	case rate.Unlimited:
		r.m.rateLimit.WithLabelValues(topic).Set(inf)
	default:
		r.m.rateLimit.WithLabelValues(topic).Set(rate.PerSecond)
	}
	r.log.Info("relay rate in force", "topic", topic, "rate", rate.String())
	// The lookup (gate, admin API) reads Redis, not Consul: it learns
	// here that the topic's jobs wait in Kafka on a pause. Every relay of
	// the topic writes the same, holder or not.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.pool.SetTopicPaused(ctx, topic, rate.Paused, r.now()); err != nil {
		r.log.Warn("recording the relay rate's pause for job lookups failed; they may not say that jobs wait on it", "topic", topic, "err", err)
	}
}

// saramaConfig is the consumer's configuration: new groups start at the
// oldest offset (nothing accepted by the gate is skipped), and offsets are
// committed by hand, only for jobs Redis accepted.
func (r *Relay) saramaConfig() (*sarama.Config, error) {
	sc, err := r.cfg.Kafka.Sarama()
	if err != nil {
		return nil, err
	}
	sc.Consumer.Offsets.Initial = sarama.OffsetOldest
	sc.Consumer.Offsets.AutoCommit.Enable = false
	sc.Consumer.Return.Errors = true
	sc.Consumer.Fetch.Default = 4 << 20
	sc.Consumer.MaxWaitTime = r.cfg.FetchWait
	sc.ChannelBufferSize = max(r.cfg.BatchSize, 256)
	return sc, nil
}
