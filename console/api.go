package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/console/dashboard"
	"github.com/sluicehq/sluice/internal/admin"
	"github.com/sluicehq/sluice/internal/canary"
	"github.com/sluicehq/sluice/internal/consul"
	"github.com/sluicehq/sluice/internal/funnel"
	"github.com/sluicehq/sluice/internal/kafka"
	"github.com/sluicehq/sluice/internal/periodic"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/tlsfiles"
)

// The admin API (docs/admin.md), under /api/v1/. Reads and writes go to
// Redis, Consul and Kafka directly, so every console answers the same,
// whichever process it runs in; only whether the coordinator lock is held,
// the scaler's targets and the scaling parameters in force come from the
// memory of a coordinator in the same process (Config.Coordinator).

// handlerFunc answers a request with a body to encode, or an error: an
// *admin.Error keeps its status, anything else is a 500.
type handlerFunc func(r *http.Request, role admin.Role) (any, error)

// mount adds the API's routes and the dashboard (at /) to mux.
func (con *Console) mount(mux *http.ServeMux) {
	routes := map[string]handlerFunc{
		"GET /api/v1/whoami":                           con.whoami,
		"GET /api/v1/stats":                            con.stats,
		"GET /api/v1/partitions":                       con.partitions,
		"GET /api/v1/canary":                           con.canary,
		"GET /api/v1/dlq":                              con.dlqList,
		"GET /api/v1/dlq/entry":                        con.dlqEntry,
		"POST /api/v1/dlq/replay":                      con.dlqReplay,
		"POST /api/v1/dlq/purge":                       con.dlqPurge,
		"GET /api/v1/rates":                            con.rateList,
		"GET /api/v1/rates/{topic}":                    con.rateGet,
		"PUT /api/v1/rates/{topic}":                    con.rateSet,
		"POST /api/v1/rates/{topic}/pause":             con.ratePause,
		"POST /api/v1/rates/{topic}/resume":            con.rateResume,
		"GET /api/v1/limits":                           con.limitList,
		"GET /api/v1/limits/{resource}":                con.limitGet,
		"PUT /api/v1/limits/{resource}":                con.limitSet,
		"DELETE /api/v1/limits/{resource}":             con.limitDelete,
		"GET /api/v1/groups":                           con.groupList,
		"GET /api/v1/groups/{group}":                   con.groupGet,
		"POST /api/v1/groups/{group}/cancel":           con.groupCancel,
		"GET /api/v1/topics/{topic}/jobs/{id}":         con.jobGet,
		"POST /api/v1/topics/{topic}/jobs/{id}/cancel": con.jobCancel,
		"DELETE /api/v1/topics/{topic}/jobs/{id}":      con.jobDelete,
		"GET /api/v1/jobs":                             con.jobList,
		"GET /api/v1/scale":                            con.scaleList,
		"PUT /api/v1/scale/{partition}":                con.scaleSet,
		"GET /api/v1/topics":                           con.topicList,
		"POST /api/v1/topics":                          con.topicCreate,
		"GET /api/v1/topics/{name}":                    con.topicGet,
		"DELETE /api/v1/topics/{name}":                 con.topicDelete,
		"GET /api/v1/periodic":                         con.periodicList,
		"GET /api/v1/periodic/{name}":                  con.periodicGet,
		"PUT /api/v1/periodic/{name}":                  con.periodicSet,
		"DELETE /api/v1/periodic/{name}":               con.periodicDelete,
		"POST /api/v1/periodic/{name}/pause":           con.periodicChange(func(s *periodic.Schedule) { s.Paused = true }),
		"POST /api/v1/periodic/{name}/resume":          con.periodicChange(func(s *periodic.Schedule) { s.Paused = false }),
		"POST /api/v1/periodic/{name}/run-now":         con.periodicRunNow(),
		"/api/v1/":                                     con.notFound,
	}
	for pattern, h := range routes {
		mux.Handle(pattern, con.wrap(pattern, h))
	}
	mux.Handle("/", dashboard.Handler())
}

// maxBody bounds a request body: the API's bodies are a few ids or values.
const maxBody = 1 << 20

// wrap authenticates, runs h, writes its JSON answer and counts it.
func (con *Console) wrap(pattern string, h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code := con.serve(w, r, h)
		con.requests.WithLabelValues(pattern, strconv.Itoa(code)).Inc()
	})
}

func (con *Console) serve(w http.ResponseWriter, r *http.Request, h handlerFunc) int {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	auth := con.auth.Load()
	if auth == nil {
		auth = &admin.Auth{}
	}
	if aerr := crossSite(r, auth.Insecure()); aerr != nil {
		con.log.Warn("admin request refused: it may come from another site", "method", r.Method, "path", r.URL.Path,
			"host", r.Host, "origin", r.Header.Get("Origin"), "err", aerr.Message)
		return writeJSON(w, aerr.Status, aerr)
	}
	caller, aerr := auth.Identify(r)
	role := caller.Role
	if aerr != nil {
		// internal/admin knows no settings: the console names its own.
		if !auth.Configured() && aerr.Status == http.StatusForbidden {
			aerr.Fix = "give the console admin tokens, \"<token> admin;<token> read\": " +
				con.setting("AdminTokens") + " or " + con.setting("AdminTokensFile") +
				" (or " + con.setting("AdminInsecure") + ", on localhost only)"
		}
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
			con.log.Error("admin request failed", "method", r.Method, "path", r.URL.Path, "err", err)
			e = &admin.Error{Status: http.StatusInternalServerError, Message: err.Error()}
		} else if e.Status >= 500 {
			con.log.Warn("admin request failed", "method", r.Method, "path", r.URL.Path, "status", e.Status, "err", e.Message)
		}
		if r.Method != http.MethodGet && e.Status < 500 {
			con.log.Info("admin request refused", "method", r.Method, "path", r.URL.Path, "status", e.Status, "err", e.Message)
		}
		return writeJSON(w, e.Status, e)
	}
	if r.Method != http.MethodGet {
		// Every change is logged with who asked: the token's name and
		// role, never the token.
		con.log.Info("admin change", "method", r.Method, "path", r.URL.Path, "token", caller.Name, "role", role.String())
	} else {
		con.log.Debug("admin read", "path", r.URL.Path, "token", caller.Name, "role", role.String())
	}
	return writeJSON(w, http.StatusOK, body)
}

// crossSite refuses what a page of another site could make a browser send
// (docs/admin.md#browsers): a browser sends no bearer token of its own,
// but with AdminInsecure none is needed.
//   - A change (not GET or HEAD) must carry Content-Type application/json
//     or an Authorization header: a page can send neither without a CORS
//     preflight, which the API never grants; and it must not come from
//     another origin (Origin, Sec-Fetch-Site).
//   - With AdminInsecure, the Host must be an IP address or localhost: a
//     name of an attacker's that resolves to 127.0.0.1 (DNS rebinding)
//     would make its page same-origin with the API.
func crossSite(r *http.Request, insecure bool) *admin.Error {
	if insecure {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		host = strings.Trim(host, "[]")
		if _, err := netip.ParseAddr(host); err != nil && !strings.EqualFold(host, "localhost") {
			return &admin.Error{Status: http.StatusForbidden, Message: fmt.Sprintf("Host %q: without tokens (--admin-insecure) the admin API answers only requests to an IP address or localhost", r.Host),
				Fix: "reach the API by its address (http://127.0.0.1:<port>), or give it admin tokens"}
		}
	}
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return nil
	}
	if site := r.Header.Get("Sec-Fetch-Site"); site == "cross-site" || site == "same-site" {
		return &admin.Error{Status: http.StatusForbidden, Message: "a change sent by a page of another site (Sec-Fetch-Site " + site + ")",
			Fix: "use the dashboard the API serves, or the sluice admin commands"}
	}
	if origin := r.Header.Get("Origin"); origin != "" {
		if u, err := url.Parse(origin); err != nil || !strings.EqualFold(u.Host, r.Host) {
			return &admin.Error{Status: http.StatusForbidden, Message: fmt.Sprintf("a change sent from origin %q to host %q", origin, r.Host),
				Fix: "use the dashboard the API serves, or the sluice admin commands"}
		}
	}
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mt != "application/json" && r.Header.Get("Authorization") == "" {
		return &admin.Error{Status: http.StatusUnsupportedMediaType, Message: fmt.Sprintf("a change needs Content-Type application/json (got %q)", r.Header.Get("Content-Type")),
			Fix: "send Content-Type: application/json, even without a body (the sluice admin commands and the dashboard do)"}
	}
	return nil
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

// setting names the Config field to an operator, in a fix: the field
// ("Config.RedisAddr"), or what Config.SettingName makes of it (sluice
// names the flag and the variable).
func (con *Console) setting(field string) string {
	if con.cfg.SettingName != nil {
		return con.cfg.SettingName(field)
	}
	return "the console's Config." + field
}

// redisErr is a Redis failure: 503, with the settings that say where
// Redis is.
func (con *Console) redisErr(err error) error {
	fix := "check that Redis runs at " + con.setting("RedisAddr") + " (" + con.cfg.RedisAddr + ") and " + con.setting("PartitionAddrs")
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return &admin.Error{Status: http.StatusServiceUnavailable, Message: "Redis did not answer in time: " + err.Error(), Fix: fix}
	}
	return &admin.Error{Status: http.StatusServiceUnavailable, Message: "Redis: " + err.Error(), Fix: fix}
}

// consulErr is a Consul failure: 503, with the setting.
func (con *Console) consulErr(err error) error {
	if consul.IsDenied(err) {
		// The error names the rule, the part and the token's flags.
		return &admin.Error{Status: http.StatusServiceUnavailable, Message: "Consul: " + err.Error(),
			Fix: "give the console a Consul token whose policy allows it: " + con.setting("ConsulToken.File") + " (`sluice consul-policy console` prints the policy)"}
	}
	return &admin.Error{Status: http.StatusServiceUnavailable, Message: "Consul: " + err.Error(),
		Fix: "check that the Consul agent answers at " + con.setting("ConsulAddr") + " (" + con.cfg.ConsulAddr + ")"}
}

// kafkaErr is a Kafka failure: 503, with the setting.
func (con *Console) kafkaErr(err error) error {
	// A TLS or SASL failure names its own fix (internal/kafka Explain).
	if ce := (*kafka.ConnectError)(nil); errors.As(err, &ce) {
		return &admin.Error{Status: http.StatusServiceUnavailable, Message: ce.Problem + " (" + ce.Err.Error() + ")", Fix: ce.Fix}
	}
	return &admin.Error{Status: http.StatusServiceUnavailable, Message: "Kafka: " + err.Error(),
		Fix: fmt.Sprintf("check that Kafka answers at %s (%v)", con.setting("Kafka.Brokers"), []string(con.cfg.Kafka.Brokers))}
}

func (con *Console) notFound(r *http.Request, _ admin.Role) (any, error) {
	return nil, notFound(fmt.Sprintf("no admin route %s %s", r.Method, r.URL.Path), "see docs/admin.md for the routes")
}

func (con *Console) whoami(_ *http.Request, role admin.Role) (any, error) {
	a := con.auth.Load()
	return admin.WhoAmI{Role: role.String(), Insecure: a != nil && a.Insecure()}, nil
}

// stats is the stage funnel report, as sluice stats -o json prints it.
func (con *Console) stats(r *http.Request, _ admin.Role) (any, error) {
	in, err := funnel.Gather(r.Context(), con.pool, con.sources(), con.cfg.Now())
	if err != nil {
		var re *funnel.RedisError
		if errors.As(err, &re) {
			return nil, con.redisErr(re.Err)
		}
		fix := "check the URLs of " + con.setting("GateMetrics")
		var he *tlsfiles.HandshakeError
		if errors.As(con.gateTLSSettings().Explain(err), &he) {
			fix = he.Fix
		}
		return nil, &admin.Error{Status: http.StatusServiceUnavailable, Message: "a gate's metrics: " + err.Error(), Fix: fix}
	}
	return funnel.Build(in), nil
}

// gateTLSSettings name the settings that mend a TLS failure reading the
// gates' /metrics.
func (con *Console) gateTLSSettings() tlsfiles.ClientSettings {
	return tlsfiles.ClientSettings{
		CAFile:     con.setting("GateMetricsTLS.CAFile"),
		CertFile:   con.setting("GateMetricsTLS.CertFile") + " and " + con.setting("GateMetricsTLS.KeyFile"),
		ServerName: con.setting("GateMetricsTLS.ServerName"),
	}
}

func (con *Console) sources() funnel.Sources {
	cfg := con.cfg
	src := funnel.Sources{ConsumerGroup: cfg.ConsumerGroup, GateMetrics: cfg.GateMetrics, GateHTTP: con.gateHTTP, Topics: con.cfg.Topics}
	if len(cfg.Kafka.Brokers) > 0 {
		k := cfg.Kafka
		src.Kafka = &k
	}
	return src
}

// partitions is every partition's state, summed over its queues, with
// each queue's, for the dashboard's table.
func (con *Console) partitions(r *http.Request, _ admin.Role) (any, error) {
	ctx := r.Context()
	topics, err := con.topics(r, "")
	if err != nil {
		return nil, err
	}
	out := admin.PartitionList{At: con.cfg.Now(), Holder: con.holds(), Partitions: []admin.PartitionState{}}
	pins, err := con.readPins(r)
	if err != nil {
		// The pins are a detail here: with Consul away, the last ones the
		// coordinator's watch saw (none without a coordinator in this
		// process, or one without a scaler).
		con.log.Warn("reading the scale pins failed; showing the last known", "err", err)
		pins = map[int]admin.Pin{}
		for part := range con.cfg.Partitions {
			if con.cfg.Coordinator == nil {
				break
			}
			if p, ok := con.cfg.Coordinator.Pin(part); ok {
				pins[part] = p
			}
		}
	}
	for part := range con.cfg.Partitions {
		load, err := con.pool.Load(ctx, part, nil, 10*con.cfg.ConsumerTTL)
		if err != nil {
			return nil, con.redisErr(err)
		}
		p := admin.PartitionState{
			Partition: admin.Partition{Partition: part, Checkpoint: load.Checkpoint},
			Queues:    []admin.QueueState{},
		}
		for _, topic := range topics {
			f, err := con.pool.Funnel(ctx, queue.Queue{Topic: topic, Part: part})
			if err != nil {
				return nil, con.redisErr(err)
			}
			q := admin.QueueState{Topic: topic, Ready: f.Ready, Delayed: f.Delayed, Inflight: f.Inflight, Dead: f.Dead,
				Completed: f.Completed, ActiveGroups: f.ActiveGroups}
			p.Queues = append(p.Queues, q)
			p.Ready += q.Ready
			p.Delayed += q.Delayed
			p.Inflight += q.Inflight
			p.Dead += q.Dead
			p.Completed += q.Completed
			p.ActiveGroups += q.ActiveGroups
		}
		p.Workers, p.Consumers = con.live(load)
		if p.Workers > 0 {
			pwqd := float64(p.Ready) / float64(p.Workers)
			p.PWQD = &pwqd
		}
		p.Target = con.target(part)
		if pin, ok := pins[part]; ok {
			p.Pin = &pin
		}
		out.Partitions = append(out.Partitions, p)
	}
	return out, nil
}

// topics are the topics a request reads: topic when it names one (a 400
// when it cannot name a queue), else every topic of the stage (the
// relays' registry and Config.Topics).
func (con *Console) topics(r *http.Request, topic string) ([]string, error) {
	if topic != "" {
		if err := queue.ValidTopic(topic); err != nil {
			return nil, badRequest(err.Error(), "")
		}
		return []string{topic}, nil
	}
	topics, err := con.registered(r.Context())
	if err != nil {
		return nil, con.redisErr(err)
	}
	return topics, nil
}

// holds reports whether the coordinator in this process holds the
// coordinator lock; false without one.
func (con *Console) holds() bool {
	return con.cfg.Coordinator != nil && con.cfg.Coordinator.Holds()
}

// target is the scaler's target for part, nil unless known: the
// coordinator in this process holds the lock and has decided.
func (con *Console) target(part int) *int {
	if con.cfg.Coordinator == nil || !con.cfg.Coordinator.Holds() {
		return nil
	}
	if t := con.cfg.Coordinator.Target(part); t > 0 {
		return &t
	}
	return nil
}

// canary is the canaries' state, as sluice stats shows it.
func (con *Console) canary(r *http.Request, _ admin.Role) (any, error) {
	ctx := r.Context()
	var in funnel.Input
	var err error
	in.Now = con.cfg.Now()
	if in.CanarySettings, in.CanaryMonitor, in.CanaryRecords, err = canary.Read(ctx, con.pool); err != nil {
		return nil, con.redisErr(err)
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
