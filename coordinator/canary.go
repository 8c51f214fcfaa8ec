package coordinator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/canary"
	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/tlsfiles"
)

// CanaryConfig configures the heartbeat canaries. No topics: none are
// sent. DefaultCanaryConfig sets the defaults each field names.
type CanaryConfig struct {
	// GateURL is the gate the canaries go through, "http://host:port",
	// or "https://host:port" for a gate serving HTTPS. Default
	// "http://127.0.0.1:8080".
	GateURL string
	// GateTLS is the TLS of an https:// GateURL: the CA that signs the
	// gate's certificate (a private CA's), a client certificate for a
	// gate that asks for one (mutual TLS). The webhook does not use it.
	// Default: no files, the system's roots.
	GateTLS tlsfiles.Client
	// Token is the gate's bearer token for the monitor: its scope needs
	// the topics and +canary. Token.File is read again before each call
	// to the gate, so a rotated token needs no restart. Default: none
	// (the gate runs without auth).
	Token cli.Secret
	// Topics are the topics served; each gets a canary per route every
	// Interval (internal/canary.Plan). Default: none.
	Topics []string
	// Interval is the time between canaries along a path: 1s at least.
	// Default 1m.
	Interval time.Duration
	// Grace is added to two intervals before a path alerts; 0: half an
	// interval. Default 30s.
	Grace time.Duration
	// Webhook, if set, gets a POST when alerts fire and when they clear.
	// Default "": none.
	Webhook string
	// Timeout bounds each HTTP call to the gate and the webhook. Default
	// 10s.
	Timeout time.Duration
	// Replan is how many rounds pass between reading the topics'
	// partition counts again. Default 10.
	Replan int
}

// DefaultCanaryConfig: a minute between canaries, 30 s of grace.
func DefaultCanaryConfig() CanaryConfig {
	return CanaryConfig{GateURL: "http://127.0.0.1:8080", Interval: time.Minute, Grace: 30 * time.Second, Timeout: 10 * time.Second, Replan: 10}
}

func (c *CanaryConfig) check() error {
	if len(c.Topics) == 0 {
		return nil
	}
	switch {
	case c.Interval < time.Second:
		return fmt.Errorf("Interval: %s, want 1s or more", c.Interval)
	case c.Grace < 0:
		return errors.New("Grace: must not be negative")
	case c.Timeout <= 0:
		return errors.New("Timeout: must be positive")
	case c.Replan < 1:
		return errors.New("Replan: must be at least 1")
	}
	if c.Grace == 0 {
		c.Grace = c.Interval / 2
	}
	u, err := url.Parse(c.GateURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("GateURL: %q, want http(s)://host:port", c.GateURL)
	}
	if c.Webhook != "" {
		if u, err := url.Parse(c.Webhook); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("Webhook: %q, want an http(s) URL", c.Webhook)
		}
	}
	return nil
}

// CanaryMonitor sends a heartbeat canary along every path of every topic
// each interval, through the gate like any client's job, and watches them
// complete: the worker's built-in handler records each arrival in its Redis
// partition (queue.Pool.RecordCanaryDone). A path whose newest completed
// canary is older than two intervals plus the grace alerts: logged once
// with what is stuck (canary.Diagnose), exported as sluice_canary_stale,
// POSTed to the webhook; it clears when canaries flow again. It records
// its settings and what it sent in Redis, so `sluice stats` judges the
// paths the same way. One monitor per stage: the coordinator's (under its
// lock) or `sluice canary`.
type CanaryMonitor struct {
	cfg  CanaryConfig
	pool CanaryRedis
	log  *slog.Logger
	http *http.Client // the webhook's
	// gateHTTP calls the gate, with CanaryConfig.GateTLS.
	gateHTTP *http.Client
	now      func() time.Time
	holder   string
	m        canaryMetrics

	mu     sync.Mutex
	alerts []string // the diagnosis in force; empty: all well
	stale  map[canary.Path]bool
	// owed: an earlier monitor told the webhook "firing" and stopped
	// before "resolved" (queue.CanaryAlerting); this one resolves it once
	// every path has completed a canary it sent.
	owed bool
}

type canaryMetrics struct {
	sent, sendErrors *prometheus.CounterVec // topic
	age, stale       *prometheus.GaugeVec   // topic, kafka_partition, redis_partition
	latency          *prometheus.HistogramVec
	interval         prometheus.Gauge
}

// NewCanaryMonitor builds a monitor; its metrics go to reg.
func NewCanaryMonitor(cfg CanaryConfig, pool CanaryRedis, reg prometheus.Registerer, holder string, log *slog.Logger) (*CanaryMonitor, error) {
	if err := cfg.check(); err != nil {
		return nil, fmt.Errorf("canary: CanaryConfig.%w", err)
	}
	gateTLS, err := cfg.GateTLS.Config()
	if err != nil {
		return nil, fmt.Errorf("canary: CanaryConfig.GateTLS.CAFile, CanaryConfig.GateTLS.CertFile, CanaryConfig.GateTLS.KeyFile: %w", err)
	}
	if cfg.Token.File != "" {
		// A missing file is the operator's to fix now, not at the first
		// round.
		if _, err := cfg.Token.Read(); err != nil {
			return nil, fmt.Errorf("canary: CanaryConfig.Token.File: %w", err)
		}
	}
	gateHTTP := &http.Client{Timeout: cfg.Timeout}
	if gateTLS != nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.TLSClientConfig = gateTLS
		gateHTTP.Transport = t
	}
	path := []string{"topic", "kafka_partition", "redis_partition"}
	m := canaryMetrics{
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_canary_sent_total", Help: "Heartbeat canaries the gate accepted, by topic.",
		}, []string{"topic"}),
		sendErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_canary_send_errors_total", Help: "Heartbeat canaries the gate did not accept (or the topic's partitions could not be read), by topic.",
		}, []string{"topic"}),
		age: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_canary_age_seconds", Help: "Per path, how long ago the newest completed canary was sent (from the monitor's start at the earliest).",
		}, path),
		stale: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_canary_stale", Help: "1 while a path's canary age is above two intervals plus the grace: the path is stuck.",
		}, path),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sluice_canary_latency_seconds", Help: "End-to-end time of completed canaries, from the POST to the gate to the worker's record, by topic.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
		}, []string{"topic"}),
		interval: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_canary_interval_seconds", Help: "Time between canaries along a path, while this process sends them.",
		}),
	}
	reg.MustRegister(m.sent, m.sendErrors, m.age, m.stale, m.latency, m.interval)
	for _, t := range cfg.Topics {
		// At zero from the start, so a rate over them has a base.
		m.sent.WithLabelValues(t)
		m.sendErrors.WithLabelValues(t)
	}
	return &CanaryMonitor{
		cfg: cfg, pool: pool, log: log.With("part", "canary"), http: &http.Client{Timeout: cfg.Timeout}, gateHTTP: gateHTTP,
		now: time.Now, holder: holder, m: m, stale: map[canary.Path]bool{},
	}, nil
}

// Alerts is the diagnosis in force: one line per stuck thing; none when
// every path flows.
func (cm *CanaryMonitor) Alerts() []string {
	cm.mu.Lock()
	defer cm.mu.Unlock()
	return slices.Clone(cm.alerts)
}

// Run sends canaries every interval and judges the paths four times an
// interval, until ctx ends or valid says the caller's lock is gone.
// Tickers are the real clock's; cm.now only stamps what is recorded.
func (cm *CanaryMonitor) Run(ctx context.Context, valid func() bool) {
	settings := canary.Settings{Interval: cm.cfg.Interval, Grace: cm.cfg.Grace, Started: cm.now(), Holder: cm.holder}
	cm.m.interval.Set(cm.cfg.Interval.Seconds())
	defer func() {
		// A monitor that stopped judges nothing: its gauges go.
		cm.m.interval.Set(0)
		cm.m.age.Reset()
		cm.m.stale.Reset()
	}()
	cm.log.Info("canary monitor started", "topics", cm.cfg.Topics, "interval", cm.cfg.Interval, "stale_after", settings.StaleAfter(), "gate", cm.cfg.GateURL)
	if alerting, err := cm.pool.CanaryAlerting(ctx); err == nil && alerting {
		cm.mu.Lock()
		cm.owed = true
		cm.mu.Unlock()
		cm.log.Warn("an earlier canary monitor left an alert firing: it is resolved here once every path completes a canary again")
	}
	var (
		routes   map[string][]canary.Route
		round    int
		lastDone = map[canary.Path]time.Time{}
		nextSend = time.Now()
		timer    = time.NewTimer(0)
	)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		if !valid() {
			return
		}
		if !time.Now().Before(nextSend) {
			// Plan every Replan rounds, and every round while a topic has
			// no routes yet (the gate did not answer: it may start later).
			if round%cm.cfg.Replan == 0 || len(routes) < len(cm.cfg.Topics) {
				routes = cm.plan(ctx, routes)
			}
			round++
			settings.Beat = cm.now()
			if err := cm.pool.SetCanaryMonitor(ctx, settings.Encode()); err != nil && ctx.Err() == nil {
				cm.log.Warn("recording the canary monitor's settings failed", "err", err)
			}
			cm.send(ctx, routes)
			// A round that ran late does not send twice to catch up.
			if nextSend = nextSend.Add(cm.cfg.Interval); nextSend.Before(time.Now()) {
				nextSend = time.Now()
			}
		}
		cm.check(ctx, settings, routes, lastDone)
		timer.Reset(min(cm.cfg.Interval/4, time.Until(nextSend)))
	}
}

// plan reads each topic's partition count from the gate and lays out its
// routes; a topic whose count cannot be read keeps its last routes. Records
// of paths no longer planned are removed.
func (cm *CanaryMonitor) plan(ctx context.Context, last map[string][]canary.Route) map[string][]canary.Route {
	out := map[string][]canary.Route{}
	layout := cm.pool.Keyspace()
	for _, topic := range cm.cfg.Topics {
		n, err := cm.partitions(ctx, topic)
		if err != nil {
			cm.m.sendErrors.WithLabelValues(topic).Inc()
			cm.log.Warn("reading the topic's partitions from the gate failed", "topic", topic, "err", err)
			if r, ok := last[topic]; ok {
				out[topic] = r
			}
			continue
		}
		out[topic] = canary.Plan(topic, n, layout)
	}
	cm.forgetUnplanned(ctx, out)
	return out
}

func (cm *CanaryMonitor) partitions(ctx context.Context, topic string) (int32, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cm.cfg.GateURL+"/v1/topics/"+url.PathEscape(topic), nil)
	if err != nil {
		return 0, err
	}
	body, err := cm.do(req)
	if err != nil {
		return 0, err
	}
	var info canary.TopicInfo
	if err := json.Unmarshal(body, &info); err != nil || info.Partitions < 1 {
		return 0, fmt.Errorf("the gate's answer %q has no partition count", body)
	}
	return info.Partitions, nil
}

// gateTLSSettings name, in a handshake error's fix, the settings that
// mend it: the flags sluice coordinator and sluice canary have.
var gateTLSSettings = tlsfiles.ClientSettings{
	CAFile:     "CanaryConfig.GateTLS.CAFile (--canary-gate-tls-ca-file)",
	CertFile:   "CanaryConfig.GateTLS.CertFile and .KeyFile (--canary-gate-tls-cert-file, --canary-gate-tls-key-file)",
	ServerName: "CanaryConfig.GateTLS.ServerName (--canary-gate-tls-server-name)",
}

// do runs req to the gate with the monitor's token and returns a 2xx
// answer's body. Its errors never hold the token.
func (cm *CanaryMonitor) do(req *http.Request) ([]byte, error) {
	tok, err := cm.cfg.Token.Read()
	if err != nil {
		return nil, fmt.Errorf("the gate's token: CanaryConfig.Token.File (--canary-token-file): %w", err)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := cm.gateHTTP.Do(req)
	if err != nil {
		return nil, gateTLSSettings.Explain(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("%s %s: %s: %s", req.Method, req.URL, resp.Status, bytes.TrimSpace(body))
	}
	return body, nil
}

func (cm *CanaryMonitor) forgetUnplanned(ctx context.Context, routes map[string][]canary.Route) {
	planned := map[canary.Path]bool{}
	for _, rs := range routes {
		for _, r := range rs {
			planned[r.Path] = true
		}
	}
	hashes, err := cm.pool.CanaryHashes(ctx)
	if err != nil {
		return // next plan
	}
	for part, h := range hashes {
		var gone []string
		for _, rec := range canary.Records(map[int]map[string]string{part: h}) {
			if !planned[rec.Path] {
				gone = append(gone, queue.CanarySentPrefix+rec.Field(), queue.CanaryDonePrefix+rec.Field())
			}
		}
		if err := cm.pool.ForgetCanaries(ctx, part, gone); err != nil {
			cm.log.Warn("removing records of unplanned canary paths failed", "partition", part, "err", err)
		}
	}
}

// send posts one canary per route, a few at a time, and records the sent
// ones in their Redis partitions.
func (cm *CanaryMonitor) send(ctx context.Context, routes map[string][]canary.Route) {
	sent := cm.now()
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		fields = map[int][]string{}
		limit  = make(chan struct{}, 8)
		failed = map[string]error{}
	)
	for topic, rs := range routes {
		for _, r := range rs {
			wg.Add(1)
			limit <- struct{}{}
			go func() {
				defer func() { <-limit; wg.Done() }()
				err := cm.post(ctx, r, sent)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					cm.m.sendErrors.WithLabelValues(topic).Inc()
					failed[topic] = err
					return
				}
				cm.m.sent.WithLabelValues(topic).Inc()
				fields[r.RedisPartition] = append(fields[r.RedisPartition], r.Field())
			}()
		}
	}
	wg.Wait()
	for topic, err := range failed {
		if ctx.Err() == nil {
			cm.log.Warn("sending canaries failed", "topic", topic, "err", err)
		}
	}
	if err := cm.pool.RecordCanariesSent(ctx, fields, sent); err != nil && ctx.Err() == nil {
		cm.log.Warn("recording sent canaries failed", "err", err)
	}
}

func (cm *CanaryMonitor) post(ctx context.Context, r canary.Route, sent time.Time) error {
	payload, _ := json.Marshal(canary.Payload{Topic: r.Topic, KafkaPartition: r.KafkaPartition, RedisPartition: r.RedisPartition, SentMS: sent.UnixMilli()})
	body, _ := json.Marshal(map[string]any{"type": canary.Type, "group": r.Group, "max_attempts": 1, "payload": json.RawMessage(payload)})
	u := cm.cfg.GateURL + "/v1/topics/" + url.PathEscape(r.Topic) + "/jobs?partition=" + strconv.Itoa(int(r.KafkaPartition))
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	_, err = cm.do(req)
	return err
}

// check judges every planned path, updates the metrics, and logs and posts
// alerts that fire or clear.
func (cm *CanaryMonitor) check(ctx context.Context, s canary.Settings, routes map[string][]canary.Route, lastDone map[canary.Path]time.Time) {
	if len(routes) == 0 {
		return
	}
	_, _, records, err := canary.Read(ctx, cm.pool)
	if err != nil {
		if ctx.Err() == nil {
			cm.log.Warn("reading canary records failed", "err", err)
		}
		return
	}
	byPath := map[canary.Path]canary.Record{}
	for _, r := range records {
		byPath[r.Path] = r
	}
	var planned []canary.Record
	for _, rs := range routes {
		for _, r := range rs {
			rec, ok := byPath[r.Path]
			if !ok {
				rec = canary.Record{Path: r.Path}
			}
			planned = append(planned, rec)
		}
	}
	statuses := canary.Evaluate(cm.now(), s, planned)
	stale := map[canary.Path]bool{}
	for _, st := range statuses {
		labels := []string{st.Topic, strconv.Itoa(int(st.KafkaPartition)), strconv.Itoa(st.RedisPartition)}
		cm.m.age.WithLabelValues(labels...).Set(st.Age.Seconds())
		cm.m.stale.WithLabelValues(labels...).Set(b2f(st.Stale))
		if st.DoneSent.After(lastDone[st.Path]) {
			if !lastDone[st.Path].IsZero() || st.DoneSent.After(s.Started) {
				cm.m.latency.WithLabelValues(st.Topic).Observe(st.Latency.Seconds())
			}
			lastDone[st.Path] = st.DoneSent
		}
		if st.Stale {
			stale[st.Path] = true
		}
	}
	var unconsumed []int
	if len(stale) > 0 {
		unconsumed = cm.unconsumed(ctx, statuses, s.StaleAfter())
	}
	cm.mu.Lock()
	var fired, cleared []canary.Path
	for p := range stale {
		if !cm.stale[p] {
			fired = append(fired, p)
		}
	}
	for p := range cm.stale {
		if !stale[p] {
			cleared = append(cleared, p)
		}
	}
	cm.stale = stale
	diagnosis := canary.Diagnose(statuses, unconsumed...)
	cm.alerts = diagnosis
	// An alert an earlier monitor left firing is resolved once every path
	// has completed a canary this monitor sent: before that, this one
	// cannot tell (its paths are young), and a path still stuck goes stale
	// here and fires again instead.
	resolveOwed := cm.owed && len(stale) == 0 && len(statuses) > 0
	for _, st := range statuses {
		resolveOwed = resolveOwed && !st.DoneSent.Before(s.Started)
	}
	if len(fired) > 0 || resolveOwed {
		cm.owed = false
	}
	cm.mu.Unlock()
	if len(fired) > 0 {
		cm.log.Error("canary alert: paths stuck", "stale_paths", len(stale), "new", pathNames(fired), "diagnosis", strings.Join(diagnosis, "; "))
		cm.notify(ctx, "firing", statuses, diagnosis)
		cm.setAlerting(ctx, true)
	}
	if len(cleared) > 0 {
		cm.log.Info("canaries flow again", "cleared", pathNames(cleared), "still_stale", len(stale))
	}
	if (len(cleared) > 0 || resolveOwed) && len(stale) == 0 {
		cm.notify(ctx, "resolved", statuses, nil)
		cm.setAlerting(ctx, false)
	}
}

// unconsumed lists the Redis partitions with stale paths and no consumer
// heartbeat younger than staleAfter (by Redis's clock): no worker has
// consumed them for as long as a path takes to go stale, so the diagnosis
// blames the missing worker, not the relay. A partition that cannot be
// read is left out (not known).
func (cm *CanaryMonitor) unconsumed(ctx context.Context, statuses []canary.Status, staleAfter time.Duration) []int {
	var out []int
	seen := map[int]bool{}
	for _, st := range statuses {
		p := st.RedisPartition
		if !st.Stale || seen[p] {
			continue
		}
		seen[p] = true
		// A long forget: the monitor only reads heartbeats; forgetting
		// old ones is the scaler's (its --consumer-ttl).
		load, err := cm.pool.Load(ctx, p, nil, 24*time.Hour)
		if err != nil {
			if ctx.Err() == nil {
				cm.log.Warn("reading a partition's consumers for the canary diagnosis failed", "partition", p, "err", err)
			}
			continue
		}
		live := false
		for _, b := range load.Consumers {
			live = live || load.Now.Sub(b.At) <= staleAfter
		}
		if !live {
			out = append(out, p)
		}
	}
	return out
}

// setAlerting records whether an alert is out, for the next monitor.
func (cm *CanaryMonitor) setAlerting(ctx context.Context, on bool) {
	if err := cm.pool.SetCanaryAlerting(ctx, on); err != nil && ctx.Err() == nil {
		cm.log.Warn("recording the canary alert's state failed", "firing", on, "err", err)
	}
}

func pathNames(ps []canary.Path) string {
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = p.String()
	}
	slices.Sort(names)
	return strings.Join(names, ",")
}

// notify posts the alert state to the webhook, once, best effort.
func (cm *CanaryMonitor) notify(ctx context.Context, status string, statuses []canary.Status, diagnosis []string) {
	if cm.cfg.Webhook == "" {
		return
	}
	type path struct {
		Topic          string  `json:"topic"`
		KafkaPartition int32   `json:"kafka_partition"`
		RedisPartition int     `json:"redis_partition"`
		AgeSeconds     float64 `json:"age_seconds"`
	}
	body := struct {
		Status    string   `json:"status"`
		Stage     string   `json:"stage"`
		Stale     []path   `json:"stale"`
		Diagnosis []string `json:"diagnosis"`
	}{Status: status, Stage: cm.pool.Keyspace().Stage, Stale: []path{}, Diagnosis: diagnosis}
	for _, st := range statuses {
		if st.Stale {
			body.Stale = append(body.Stale, path{st.Topic, st.KafkaPartition, st.RedisPartition, st.Age.Seconds()})
		}
	}
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, cm.cfg.Webhook, bytes.NewReader(b))
	if err != nil {
		return
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := cm.http.Do(req)
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			err = fmt.Errorf("answered %s", resp.Status)
		}
	}
	if err != nil {
		cm.log.Warn("the canary webhook failed", "status", status, "err", err)
	}
}
