package main

import (
	"context"
	"encoding/json"
	"flag"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/coordinator"
	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/internal/admin"
	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/funnel"
	"github.com/sluicehq/sluice/internal/limits"
	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/internal/tlsfiles"
)

// httpsHealthz is a /healthz probe over HTTPS with c's TLS.
func httpsHealthz(t *testing.T, c tlsfiles.Client) func(addr string) int {
	t.Helper()
	tc, err := c.Config()
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}
	t.Cleanup(hc.CloseIdleConnections)
	return func(addr string) int {
		resp, err := hc.Get("https://" + addr + "/healthz")
		if err != nil {
			return 0
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
}

// writeFile writes content to a 0600 file in dir and returns its path.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestConsoleOverHTTPSServesTheAdminCommands: sluice console with
// --tls-cert-file and --tls-key-file (tokens from --admin-tokens-file)
// serves the admin commands that trust its CA (--admin-tls-ca-file, or
// SLUICE_ADMIN_TLS_CA_FILE), the token from --admin-token-file. A command
// that trusts another CA, or dials http://, is told which flag to fix, and
// no output holds the token.
func TestConsoleOverHTTPSServesTheAdminCommands(t *testing.T) {
	b := newConsoleBed(t)
	certs := testenv.NewCerts(t)
	dir := t.TempDir()
	tokens := writeFile(t, dir, "admin-tokens", "# the console's\n"+consoleTestToken+" admin\n")
	tokenFile := writeFile(t, dir, "admin-token", consoleTestToken+"\n")
	addr := b.startProbed(t, "console", httpsHealthz(t, tlsfiles.Client{CAFile: certs.CAFile}),
		"--tls-cert-file", certs.ServerCertFile, "--tls-key-file", certs.ServerKey, "--admin-tokens-file", tokens)
	api := []string{"--admin-url", "https://" + addr, "--admin-tls-ca-file", certs.CAFile, "--admin-token-file", tokenFile}

	if code, out, errOut := cliRun(append([]string{"rate", "set", "jobs", "5"}, api...)...); code != 0 {
		t.Fatalf("sluice rate set over HTTPS: exit %d\n%s\n%s", code, out, errOut)
	}
	kv, _, err := b.consul.Client().KV().Get("sluice/test/relay/jobs/rate", nil)
	if err != nil || kv == nil {
		t.Fatalf("the rate is not in Consul: %v %v", kv, err)
	}
	if r, err := limits.ParseRate(kv.Value); err != nil || r.PerSecond != 5 {
		t.Errorf("Consul holds %s: %+v %v", kv.Value, r, err)
	}
	code, out, errOut := cliRun(append([]string{"stats", "-o", "json"}, api...)...)
	var report struct{ Topics []json.RawMessage }
	if code > 1 || json.Unmarshal([]byte(out), &report) != nil || strings.Contains(errOut, "tls") {
		t.Errorf("sluice stats over HTTPS: exit %d\n%s\n%s", code, out, errOut)
	}

	for _, c := range []struct {
		name  string
		args  []string
		wants []string
	}{
		{"another CA", []string{"--admin-url", "https://" + addr, "--admin-tls-ca-file", certs.OtherCAFile, "--admin-token-file", tokenFile},
			[]string{"not signed by a CA this client trusts", "--admin-tls-ca-file"}},
		{"the system's roots", []string{"--admin-url", "https://" + addr, "--admin-token-file", tokenFile},
			[]string{"--admin-tls-ca-file"}},
		{"plain HTTP", []string{"--admin-url", "http://" + addr, "--admin-token-file", tokenFile},
			[]string{"serves HTTPS", "https://"}},
	} {
		code, out, errOut := cliRun(append([]string{"groups", "ls"}, c.args...)...)
		t.Logf("%s: %s", c.name, errOut)
		if code != 1 || strings.Contains(errOut, "cannot reach") || strings.Contains(out+errOut, consoleTestToken) {
			t.Errorf("%s: exit %d\n%s\n%s", c.name, code, out, errOut)
		}
		for _, want := range c.wants {
			if !strings.Contains(errOut, want) {
				t.Errorf("%s: %q does not say %q", c.name, errOut, want)
			}
		}
	}

	// The variables every admin command reads.
	t.Setenv("SLUICE_ADMIN_URL", "https://"+addr)
	t.Setenv("SLUICE_ADMIN_TLS_CA_FILE", certs.CAFile)
	t.Setenv("SLUICE_ADMIN_TOKEN_FILE", tokenFile)
	code, out, errOut = cliRun("scale", "show", "-o", "json")
	var scale admin.ScaleList
	if code != 0 || json.Unmarshal([]byte(out), &scale) != nil || len(scale.Partitions) != 2 {
		t.Errorf("sluice scale show with SLUICE_ADMIN_*: exit %d\n%s\n%s", code, out, errOut)
	}
}

// TestCoordinatorServesItsListenerOverMutualTLS: sluice coordinator's
// --tls-* (the console's flags) serve its whole listener over HTTPS: the
// admin commands with a client certificate its --tls-client-ca-file
// signed, /metrics too; a command without a certificate is told to give
// one. With --console=false the listener is still HTTPS.
func TestCoordinatorServesItsListenerOverMutualTLS(t *testing.T) {
	b := newConsoleBed(t)
	certs := testenv.NewCerts(t)
	serverTLS := []string{"--tls-cert-file", certs.ServerCertFile, "--tls-key-file", certs.ServerKey, "--tls-client-ca-file", certs.CAFile}
	addr := b.startProbed(t, "coordinator", httpsHealthz(t, certs.Client()),
		append(serverTLS, "--admin-tokens", consoleTestToken+" admin", "--lock-delay", "0")...)
	api := []string{"--admin-url", "https://" + addr, "--admin-tls-ca-file", certs.CAFile, "--admin-token", consoleTestToken}

	if code, out, errOut := cliRun(append([]string{"scale", "show", "--admin-tls-cert-file", certs.ClientCertFile, "--admin-tls-key-file", certs.ClientKey}, api...)...); code != 0 {
		t.Fatalf("sluice scale show with a client certificate: exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, errOut := cliRun(append([]string{"scale", "show"}, api...)...)
	t.Logf("without a client certificate: %s", errOut)
	if code != 1 || !strings.Contains(errOut, "--admin-tls-cert-file") || strings.Contains(out+errOut, consoleTestToken) {
		t.Errorf("sluice scale show without a client certificate: exit %d\n%s\n%s", code, out, errOut)
	}

	tc, err := certs.Client().Config()
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("https://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(metrics), "sluice_coordinator_lock_held") {
		t.Errorf("/metrics over mutual TLS:\n%.1000s", metrics)
	}

	b.startProbed(t, "coordinator", httpsHealthz(t, certs.Client()), append(serverTLS, "--console=false")...)
}

// TestServersNameTheTLSFlagOfAFileTheyCannotLoad: sluice gate and sluice
// console refuse to start on a certificate, key or client CA file they
// cannot load, naming the flag and its variable.
func TestServersNameTheTLSFlagOfAFileTheyCannotLoad(t *testing.T) {
	certs := testenv.NewCerts(t)
	missing := filepath.Join(certs.Dir, "missing.pem")
	for _, c := range []struct {
		args  []string
		wants []string
	}{
		{[]string{"gate", "--listen", "127.0.0.1:0", "--allow-no-auth", "--kafka-brokers", "127.0.0.1:1", "--tls-cert-file", missing, "--tls-key-file", certs.ServerKey},
			[]string{"missing.pem", "--tls-cert-file / SLUICE_GATE_TLS_CERT_FILE"}},
		{[]string{"gate", "--listen", "127.0.0.1:0", "--allow-no-auth", "--kafka-brokers", "127.0.0.1:1", "--tls-cert-file", certs.ServerCertFile},
			[]string{"--tls-key-file / SLUICE_GATE_TLS_KEY_FILE"}},
		{[]string{"console", "--listen", "127.0.0.1:0", "--tls-cert-file", certs.ServerCertFile, "--tls-key-file", certs.ServerKey, "--tls-client-ca-file", missing},
			[]string{"missing.pem", "--tls-client-ca-file / SLUICE_CONSOLE_TLS_CLIENT_CA_FILE"}},
	} {
		code, _, errOut := cliRun(c.args...)
		t.Logf("sluice %s: %s", c.args[0], errOut)
		if code != 1 {
			t.Errorf("sluice %s: exit %d, want 1: %s", strings.Join(c.args, " "), code, errOut)
		}
		for _, want := range c.wants {
			if !strings.Contains(errOut, want) {
				t.Errorf("sluice %s: %q does not say %q", strings.Join(c.args, " "), errOut, want)
			}
		}
	}
}

// TestCanaryTokenFromAFileThroughAnHTTPSGate: the canary monitor, set up by
// sluice canary's flags, reaches a gate serving HTTPS through
// --canary-gate-tls-ca-file with the token of --canary-token-file, read
// again each call: a wrong token is refused, and once the file holds the
// right one canaries flow without a restart. No log line holds either.
// Then sluice stats reads the same gate's /metrics over HTTPS.
func TestCanaryTokenFromAFileThroughAnHTTPSGate(t *testing.T) {
	certs := testenv.NewCerts(t)
	k := testenv.Kafka(t, testenv.Topic("jobs", 2))
	redis := testenv.Redis(t)
	dir := t.TempDir()
	const right, wrong = "the-canary-token-0123456789", "a-wrong-token-0123456789"
	var logs testenv.LogBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))

	gcfg := gate.DefaultConfig()
	gcfg.Kafka.Brokers = k.Brokers()
	gcfg.TokensFile = writeFile(t, dir, "gate-tokens", right+" *,+canary\n")
	gcfg.TLS = certs.Server(false)
	ctx, cancel := context.WithCancel(context.Background())
	g, err := gate.New(ctx, gcfg, log)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gateDone := make(chan error, 1)
	go func() { gateDone <- g.Serve(ctx, ln) }()

	tokenFile := writeFile(t, dir, "canary-token", wrong+"\n")
	fs := flag.NewFlagSet("canary", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg := coordinator.DefaultCanaryConfig()
	cfg.RegisterFlags(fs)
	if err := cli.Parse(fs, "canary", []string{"--canary-topics", "jobs", "--canary-gate", "https://" + ln.Addr().String(),
		"--canary-gate-tls-ca-file", certs.CAFile, "--canary-token-file", tokenFile, "--canary-interval", "1s"}); err != nil {
		t.Fatal(err)
	}
	pool, err := queue.NewPool(queue.PoolConfig{Keyspace: queue.Keyspace{Stage: "test", Partitions: 2}, Addr: redis.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	if err := pool.LoadScripts(ctx); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	mon, err := coordinator.NewCanaryMonitor(cfg, pool, reg, "test", log)
	if err != nil {
		t.Fatal(err)
	}
	monDone := make(chan struct{})
	go func() { defer close(monDone); mon.Run(ctx, func() bool { return true }) }()
	t.Cleanup(func() {
		cancel()
		<-monDone
		if err := <-gateDone; err != nil {
			t.Errorf("gate.Serve: %v", err)
		}
		pool.Close()
	})

	testenv.WaitFor(t, 15*time.Second, "the wrong token to be refused", func() bool {
		return testenv.Metric(t, reg, "sluice_canary_send_errors_total", "topic", "jobs") > 0
	})
	if sent := testenv.Metric(t, reg, "sluice_canary_sent_total", "topic", "jobs"); sent != 0 {
		t.Fatalf("the gate took %v canaries with the wrong token", sent)
	}
	writeFile(t, dir, "canary-token", right+"\n")
	testenv.WaitFor(t, 15*time.Second, "canaries with the token now in the file", func() bool {
		return testenv.Metric(t, reg, "sluice_canary_sent_total", "topic", "jobs") > 0
	})
	if l := logs.String(); strings.Contains(l, right) || strings.Contains(l, wrong) {
		t.Errorf("a token is in the logs:\n%s", l)
	}
	if !strings.Contains(logs.String(), "unknown bearer token") {
		t.Errorf("the refusal of the wrong token is not logged:\n%s", logs.String())
	}

	// sluice stats reads the HTTPS gate's /metrics with
	// --gate-metrics-tls-ca-file, and names that flag without it.
	direct := []string{"stats", "-o", "json", "--redis-addr", redis.Addr(), "--stage", "test", "--redis-partitions", "2",
		"--gate-metrics", "https://" + ln.Addr().String() + "/metrics"}
	code, out, errOut := cliRun(append(direct, "--gate-metrics-tls-ca-file", certs.CAFile)...)
	var report funnel.Report
	if code > 1 || json.Unmarshal([]byte(out), &report) != nil {
		t.Fatalf("sluice stats reading an HTTPS gate: exit %d\n%s\n%s", code, out, errOut)
	}
	counted := false
	for _, tp := range report.Topics {
		counted = counted || tp.Topic == "jobs" && tp.Gate != nil
	}
	if !counted {
		t.Errorf("sluice stats shows no gate counts of topic jobs: %s", out)
	}
	code, _, errOut = cliRun(direct...)
	if code != 1 || !strings.Contains(errOut, "--gate-metrics-tls-ca-file") {
		t.Errorf("sluice stats not trusting the gate's CA: exit %d: %s", code, errOut)
	}
}
