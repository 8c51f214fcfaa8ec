package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/coordinator/dashboard"
	"github.com/sluicehq/sluice/internal/admin"
	"github.com/sluicehq/sluice/internal/canary"
	"github.com/sluicehq/sluice/internal/funnel"
	"github.com/sluicehq/sluice/internal/kafka"
	"github.com/sluicehq/sluice/internal/queue"
)

// The admin API (docs/admin.md): served by every coordinator, holder or
// standby, under /api/v1/ on its listener. Reads and writes go to Redis,
// Consul and Kafka directly; only the scaler's targets come from the
// holder's memory.

// AdminConfig configures the admin API. The queues it reads are the
// coordinator's: the registered topics' and Config.Topics.
type AdminConfig struct {
	// Auth checks the bearer tokens; nil answers every request 403 (no
	// tokens configured). Default nil.
	Auth *admin.Auth
	// Kafka, with brokers, is where the DLQ topics are read and replayed
	// to and the relay's lag read; without brokers those answer 503.
	// Default: no brokers (client id sluice-coordinator, version 3.6.0).
	Kafka kafka.Config
	// ConsumerGroup is the relays' --consumer-group (their lag is read as
	// <group>.<topic>). Default "sluice-relay".
	ConsumerGroup string
	// GateMetrics are the gates' /metrics URLs for /api/v1/stats.
	// Default: none.
	GateMetrics []string
}

// adminAPI serves /api/v1/.
type adminAPI struct {
	c        *Coordinator
	log      *slog.Logger
	requests *prometheus.CounterVec // route, code
}

func newAdminAPI(c *Coordinator) *adminAPI {
	a := &adminAPI{c: c, log: c.log.With("part", "admin")}
	a.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_coordinator_admin_requests_total",
		Help: "Admin API requests by route pattern and status code.",
	}, []string{"route", "code"})
	c.reg.MustRegister(a.requests)
	return a
}

// handlerFunc answers a request with a body to encode, or an error: an
// *admin.Error keeps its status, anything else is a 500.
type handlerFunc func(r *http.Request, role admin.Role) (any, error)

// mount adds the API's routes and the dashboard (at /) to mux.
func (a *adminAPI) mount(mux *http.ServeMux) {
	routes := map[string]handlerFunc{
		"GET /api/v1/whoami":                 a.whoami,
		"GET /api/v1/stats":                  a.stats,
		"GET /api/v1/partitions":             a.partitions,
		"GET /api/v1/canary":                 a.canary,
		"GET /api/v1/dlq":                    a.dlqList,
		"GET /api/v1/dlq/entry":              a.dlqEntry,
		"POST /api/v1/dlq/replay":            a.dlqReplay,
		"POST /api/v1/dlq/purge":             a.dlqPurge,
		"GET /api/v1/rates":                  a.rateList,
		"GET /api/v1/rates/{topic}":          a.rateGet,
		"PUT /api/v1/rates/{topic}":          a.rateSet,
		"POST /api/v1/rates/{topic}/pause":   a.ratePause,
		"POST /api/v1/rates/{topic}/resume":  a.rateResume,
		"GET /api/v1/limits":                 a.limitList,
		"GET /api/v1/limits/{resource}":      a.limitGet,
		"PUT /api/v1/limits/{resource}":      a.limitSet,
		"DELETE /api/v1/limits/{resource}":   a.limitDelete,
		"GET /api/v1/groups":                 a.groupList,
		"GET /api/v1/groups/{group}":         a.groupGet,
		"POST /api/v1/groups/{group}/cancel": a.groupCancel,
		"GET /api/v1/scale":                  a.scaleList,
		"PUT /api/v1/scale/{partition}":      a.scaleSet,
		"/api/v1/":                           a.notFound,
	}
	for pattern, h := range routes {
		mux.Handle(pattern, a.wrap(pattern, h))
	}
	mux.Handle("/", dashboard.Handler())
}

// maxBody bounds a request body: the API's bodies are a few ids or values.
const maxBody = 1 << 20

// wrap authenticates, runs h, writes its JSON answer and counts it.
func (a *adminAPI) wrap(pattern string, h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code := a.serve(w, r, h)
		a.requests.WithLabelValues(pattern, strconv.Itoa(code)).Inc()
	})
}

func (a *adminAPI) serve(w http.ResponseWriter, r *http.Request, h handlerFunc) int {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	auth := a.c.cfg.Admin.Auth
	if auth == nil {
		auth = &admin.Auth{}
	}
	role, aerr := auth.Check(r)
	if aerr != nil {
		return writeJSON(w, aerr.Status, aerr)
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxBody)
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	r = r.WithContext(ctx)
	body, err := h(r, role)
	if err != nil {
		var e *admin.Error
		if !errors.As(err, &e) {
			a.log.Error("admin request failed", "method", r.Method, "path", r.URL.Path, "err", err)
			e = &admin.Error{Status: http.StatusInternalServerError, Message: err.Error()}
		} else if e.Status >= 500 {
			a.log.Warn("admin request failed", "method", r.Method, "path", r.URL.Path, "status", e.Status, "err", e.Message)
		}
		if r.Method != http.MethodGet && e.Status < 500 {
			a.log.Info("admin request refused", "method", r.Method, "path", r.URL.Path, "status", e.Status, "err", e.Message)
		}
		return writeJSON(w, e.Status, e)
	}
	if r.Method != http.MethodGet {
		// Every change is logged with who (the role) asked.
		a.log.Info("admin change", "method", r.Method, "path", r.URL.Path, "role", role.String())
	}
	return writeJSON(w, http.StatusOK, body)
}

func writeJSON(w http.ResponseWriter, code int, v any) int {
	b, err := json.Marshal(v)
	if err != nil {
		code = http.StatusInternalServerError
		b, _ = json.Marshal(admin.Error{Message: "encoding the answer: " + err.Error()})
	}
	w.WriteHeader(code)
	w.Write(append(b, '\n'))
	return code
}

// decodeBody reads the request's JSON body into v, refusing unknown fields.
func decodeBody(r *http.Request, v any) error {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return badRequest(fmt.Sprintf("the body is larger than %d bytes", maxBody), "")
		}
		if errors.Is(err, io.EOF) {
			return badRequest("the body is empty: want a JSON object", "")
		}
		return badRequest("the body: "+err.Error(), "")
	}
	if dec.More() {
		return badRequest("the body holds more than one JSON value", "")
	}
	return nil
}

func badRequest(msg, fix string) error {
	return &admin.Error{Status: http.StatusBadRequest, Message: msg, Fix: fix}
}

func notFound(msg, fix string) error {
	return &admin.Error{Status: http.StatusNotFound, Message: msg, Fix: fix}
}

// redisErr is a Redis failure: 503, with the flags that say where Redis is.
func (a *adminAPI) redisErr(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return &admin.Error{Status: http.StatusServiceUnavailable, Message: "Redis did not answer in time: " + err.Error(),
			Fix: "check that Redis runs at the coordinator's --redis-addr (" + a.c.cfg.RedisAddr + ") / --redis-partition-addrs"}
	}
	return &admin.Error{Status: http.StatusServiceUnavailable, Message: "Redis: " + err.Error(),
		Fix: "check that Redis runs at the coordinator's --redis-addr (" + a.c.cfg.RedisAddr + ") / --redis-partition-addrs"}
}

// consulErr is a Consul failure: 503, with the flag.
func (a *adminAPI) consulErr(err error) error {
	return &admin.Error{Status: http.StatusServiceUnavailable, Message: "Consul: " + err.Error(),
		Fix: "check that the Consul agent answers at the coordinator's --consul-addr (" + a.c.cfg.ConsulAddr + ")"}
}

// kafkaErr is a Kafka failure: 503, with the flag.
func (a *adminAPI) kafkaErr(err error) error {
	return &admin.Error{Status: http.StatusServiceUnavailable, Message: "Kafka: " + err.Error(),
		Fix: fmt.Sprintf("check that Kafka answers at the coordinator's --kafka-brokers (%v)", []string(a.c.cfg.Admin.Kafka.Brokers))}
}

func (a *adminAPI) notFound(r *http.Request, _ admin.Role) (any, error) {
	return nil, notFound(fmt.Sprintf("no admin route %s %s", r.Method, r.URL.Path), "see docs/admin.md for the routes")
}

func (a *adminAPI) whoami(_ *http.Request, role admin.Role) (any, error) {
	return admin.WhoAmI{Role: role.String(), Insecure: a.c.cfg.Admin.Auth != nil && a.c.cfg.Admin.Auth.Insecure()}, nil
}

// stats is the stage funnel report, as sluice stats -o json prints it.
func (a *adminAPI) stats(r *http.Request, _ admin.Role) (any, error) {
	in, err := funnel.Gather(r.Context(), a.c.pool, a.sources(), a.c.cfg.Now())
	if err != nil {
		var re *funnel.RedisError
		if errors.As(err, &re) {
			return nil, a.redisErr(re.Err)
		}
		return nil, &admin.Error{Status: http.StatusServiceUnavailable, Message: "a gate's metrics: " + err.Error(),
			Fix: "check the coordinator's --gate-metrics URLs"}
	}
	return funnel.Build(in), nil
}

func (a *adminAPI) sources() funnel.Sources {
	cfg := a.c.cfg.Admin
	src := funnel.Sources{ConsumerGroup: cfg.ConsumerGroup, GateMetrics: cfg.GateMetrics, Topics: a.c.cfg.Topics}
	if len(cfg.Kafka.Brokers) > 0 {
		k := cfg.Kafka
		src.Kafka = &k
	}
	return src
}

// partitions is every partition's state, summed over its queues, with
// each queue's, for the dashboard's table.
func (a *adminAPI) partitions(r *http.Request, _ admin.Role) (any, error) {
	ctx := r.Context()
	topics, err := a.topics(r, "")
	if err != nil {
		return nil, err
	}
	out := PartitionList{At: a.c.cfg.Now(), Holder: a.c.Holds(), Partitions: []PartitionState{}}
	pins, err := a.readPins(r)
	if err != nil {
		// The pins are a detail here: with Consul away, the last ones the
		// watch saw (none on a coordinator without a scaler).
		a.log.Warn("reading the scale pins failed; showing the last known", "err", err)
		pins = map[int]admin.Pin{}
		for part := range a.c.cfg.Partitions {
			if p, ok := a.c.pinOf(part); ok {
				pins[part] = p
			}
		}
	}
	for part := range a.c.cfg.Partitions {
		load, err := a.c.pool.Load(ctx, part, nil, 10*a.c.cfg.ConsumerTTL)
		if err != nil {
			return nil, a.redisErr(err)
		}
		p := PartitionState{
			Partition: admin.Partition{Partition: part, Checkpoint: load.Checkpoint},
			Queues:    []QueueState{},
		}
		for _, topic := range topics {
			f, err := a.c.pool.Funnel(ctx, queue.Queue{Topic: topic, Part: part})
			if err != nil {
				return nil, a.redisErr(err)
			}
			q := QueueState{Topic: topic, Ready: f.Ready, Delayed: f.Delayed, Inflight: f.Inflight, Dead: f.Dead,
				Completed: f.Completed, ActiveGroups: f.ActiveGroups}
			p.Queues = append(p.Queues, q)
			p.Ready += q.Ready
			p.Delayed += q.Delayed
			p.Inflight += q.Inflight
			p.Dead += q.Dead
			p.Completed += q.Completed
			p.ActiveGroups += q.ActiveGroups
		}
		p.Workers, p.Consumers = a.live(load)
		if p.Workers > 0 {
			pwqd := float64(p.Ready) / float64(p.Workers)
			p.PWQD = &pwqd
		}
		p.Target = a.target(part)
		if pin, ok := pins[part]; ok {
			p.Pin = &pin
		}
		out.Partitions = append(out.Partitions, p)
	}
	return out, nil
}

// topics are the topics a request reads: topic when it names one (a 400
// when it cannot name a queue), else every topic of the stage (the
// relays' registry and the coordinator's --topics).
func (a *adminAPI) topics(r *http.Request, topic string) ([]string, error) {
	if topic != "" {
		if err := queue.ValidTopic(topic); err != nil {
			return nil, badRequest(err.Error(), "")
		}
		return []string{topic}, nil
	}
	topics, err := a.c.topics(r.Context())
	if err != nil {
		return nil, a.redisErr(err)
	}
	return topics, nil
}

// target is the scaler's target for part, nil unless known (holder).
func (a *adminAPI) target(part int) *int {
	if t := int(a.c.targets[part].Load()); t > 0 && a.c.Holds() {
		return &t
	}
	return nil
}

// canary is the canaries' state, as sluice stats shows it.
func (a *adminAPI) canary(r *http.Request, _ admin.Role) (any, error) {
	ctx := r.Context()
	var in funnel.Input
	var err error
	in.Now = a.c.cfg.Now()
	if in.CanarySettings, in.CanaryMonitor, in.CanaryRecords, err = canary.Read(ctx, a.c.pool); err != nil {
		return nil, a.redisErr(err)
	}
	out := admin.CanaryState{Paths: []admin.CanaryPath{}, Alerts: []string{}}
	rep := funnel.Build(in)
	if rep.Canary == nil {
		return out, nil
	}
	c := rep.Canary
	out.Monitor = in.CanaryMonitor
	out.Holder, out.Interval, out.Grace = c.Monitor, c.Interval.Seconds(), c.Grace.Seconds()
	out.LastRound = admin.TimePtr(c.LastRound)
	out.Alerts = append(out.Alerts, c.Alerts...)
	for _, p := range c.Paths {
		out.Paths = append(out.Paths, admin.CanaryPath{
			Topic: p.Topic, KafkaPartition: p.KafkaPartition, RedisPartition: p.RedisPartition,
			Age: p.Age.Seconds(), Latency: p.Latency.Seconds(), Sent: admin.TimePtr(p.Sent), Done: admin.TimePtr(p.Done), Stale: p.Stale,
		})
	}
	return out, nil
}

// requestTimeout bounds what one admin request may spend on the stores.
const requestTimeout = 30 * time.Second
