package coordinator

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/consul"
	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/periodic"
	"github.com/sluicehq/sluice/internal/tlsfiles"
)

// PeriodicConfig configures the periodic scheduler (docs/periodic.md):
// while it holds the lock, the coordinator fires the schedules of Consul
// KV sluice/<stage>/periodic/ by posting their jobs to the gate.
type PeriodicConfig struct {
	// Enable runs the scheduler. Default true (with no schedule in Consul
	// it posts nothing).
	Enable bool
	// GateURL is the gate the jobs are posted to, "http(s)://host:port".
	// Default "http://127.0.0.1:8080".
	GateURL string
	// GateTLS is the TLS of an https:// GateURL: the CA that signs the
	// gate's certificate (a private CA's), a client certificate for a
	// gate that asks for one (mutual TLS). Default: no files, the
	// system's roots.
	GateTLS tlsfiles.Client
	// Token is the gate's bearer token for the schedules' topics. Default
	// none: a gate without auth.
	Token cli.Secret
	// Timeout bounds each post. Default 10s.
	Timeout time.Duration
	// Clock is the scheduler's time. No flag: set it in code (tests).
	// Default nil: the wall clock.
	Clock periodic.Clock
}

// DefaultPeriodicConfig: on, posting to the gate on localhost.
func DefaultPeriodicConfig() PeriodicConfig {
	return PeriodicConfig{Enable: true, GateURL: "http://127.0.0.1:8080", Timeout: 10 * time.Second}
}

// RegisterFlags adds the --periodic* flags to fs, bound to c's fields.
func (c *PeriodicConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.BoolVar(&c.Enable, "periodic", c.Enable, "fire the periodic schedules of Consul KV sluice/<stage>/periodic/ while holding the lock (docs/periodic.md)")
	fs.StringVar(&c.GateURL, "periodic-gate", c.GateURL, "the gate periodic jobs are posted to (https://host:port for a gate serving HTTPS)")
	c.GateTLS.Register(fs, "periodic-gate", "the gate")
	cli.SecretVar(fs, &c.Token, "periodic-token", "the gate's bearer token for the schedules' topics")
	cli.DurationVar(fs, &c.Timeout, "periodic-timeout", c.Timeout, "time limit of each post of a periodic job")
}

func (c *PeriodicConfig) check() error {
	if !c.Enable {
		return nil
	}
	if c.Timeout <= 0 {
		return errors.New("Timeout: must be positive")
	}
	u, err := url.Parse(c.GateURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("GateURL: %q, want http(s)://host:port", c.GateURL)
	}
	if _, err := c.GateTLS.Config(); err != nil {
		return fmt.Errorf("GateTLS.CAFile, Config.Periodic.GateTLS.CertFile, Config.Periodic.GateTLS.KeyFile: %w", err)
	}
	return nil
}

// periodicTLSSettings name, in a handshake error's fix, the settings that
// mend it.
var periodicTLSSettings = tlsfiles.ClientSettings{
	CAFile:     "Config.Periodic.GateTLS.CAFile (--periodic-gate-tls-ca-file)",
	CertFile:   "Config.Periodic.GateTLS.CertFile and .KeyFile (--periodic-gate-tls-cert-file, --periodic-gate-tls-key-file)",
	ServerName: "Config.Periodic.GateTLS.ServerName (--periodic-gate-tls-server-name)",
}

// gateHTTP is the client that posts to the gate, with GateTLS (checked
// by check).
func (c PeriodicConfig) gateHTTP() *http.Client {
	tc, _ := c.GateTLS.Config()
	if tc == nil {
		return &http.Client{}
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = tc
	return &http.Client{Transport: t}
}

// gatePoster posts periodic jobs to the gate.
type gatePoster struct {
	cfg  PeriodicConfig
	http *http.Client
}

// Post sends j (its id chosen by the schedule) to topic. The gate marks
// the id as client-chosen, so the relay queues a slot posted twice once.
func (g gatePoster) Post(ctx context.Context, topic string, j job.Job) error {
	body := j.AppendJSON(nil)
	ctx, cancel := context.WithTimeout(ctx, g.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.cfg.GateURL+"/v1/topics/"+url.PathEscape(topic)+"/jobs", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if g.cfg.Token.Set() {
		tok, err := g.cfg.Token.Read()
		if err != nil {
			return fmt.Errorf("Config.Periodic.Token (--periodic-token-file): %w", err)
		}
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := g.http.Do(req)
	if err != nil {
		return periodicTLSSettings.Explain(err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		err := fmt.Errorf("POST %s: %s: %s", req.URL, resp.Status, bytes.TrimSpace(answer))
		if refusedForGood(resp.StatusCode) {
			return &periodic.RefusedError{Err: err}
		}
		return err
	}
	return nil
}

// refusedForGood tells a 4xx that posting again cannot mend (400, 404
// unknown topic, 413, 422...) from one that may pass later: 401 and 403
// (a token file rotated, re-read on every post), 408 and 429.
func refusedForGood(status int) bool {
	switch status {
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusRequestTimeout, http.StatusTooManyRequests:
		return false
	}
	return status/100 == 4
}

// newScheduler builds the scheduler and starts following the schedules in
// Consul until ctx ends, so that a standby knows them when it takes over.
func (c *Coordinator) newScheduler() *periodic.Scheduler {
	return periodic.NewScheduler(periodic.SchedulerConfig{
		Poster:  gatePoster{cfg: c.cfg.Periodic, http: c.cfg.Periodic.gateHTTP()},
		Store:   periodic.PoolStore{Pool: c.pool},
		Clock:   c.cfg.Periodic.Clock,
		Log:     c.log,
		Metrics: periodic.NewMetrics(c.reg, "coordinator"),
	})
}

// scheduleWatchWait bounds how long the schedules' watch blocks per query.
const scheduleWatchWait = 10 * time.Second

// watchSchedules hands the scheduler every change of the schedules.
func (c *Coordinator) watchSchedules(ctx context.Context) {
	prefix, err := periodic.SchedulesPrefix(c.cfg.Stage)
	if err == nil {
		// A short wait: after a Consul that came back empty, an HTTP
		// client's silent retry of the blocking query can wait on an index
		// the new agent has not reached, up to WaitTime, before the
		// schedules written again are seen.
		opts := consul.WatchOptions{WaitTime: scheduleWatchWait, Log: c.log.With("watch", "periodic")}
		err = consul.WatchPrefix(ctx, c.consul, prefix, opts, c.scheduler.Update)
	}
	if err != nil {
		c.log.Error("periodic: cannot watch the schedules", "err", err)
	}
}
