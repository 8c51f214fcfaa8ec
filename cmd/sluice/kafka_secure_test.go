package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/queue"
	"github.com/sluicehq/sluice/internal/testenv"
)

const (
	kafkaTestUser = "sluice"
	kafkaTestPass = "kafka-test-password"
)

// TestKafkaSASLAndTLSEndToEnd: sluice gate, relay and console reach a Kafka
// that wants SCRAM-SHA-512 over TLS through their --kafka-sasl-* and
// --kafka-tls-* flags (the password from a file and from SLUICE_*): a job
// POSTed to the gate reaches Redis, and the console reads the DLQ. A wrong
// password and an untrusted CA stop sluice gate at start, in seconds, with
// an error that says so and names the flags, never the password.
func TestKafkaSASLAndTLSEndToEnd(t *testing.T) {
	certs := testenv.NewCerts(t)
	k := testenv.Kafka(t, testenv.Topic("jobs", 2), testenv.Topic("jobs.dlq", 1),
		testenv.KafkaSASL("SCRAM-SHA-512", kafkaTestUser, kafkaTestPass), testenv.KafkaTLS(certs))
	b := newConsoleBed(t)
	dir := t.TempDir()
	passFile := filepath.Join(dir, "kafka-password")
	wrongFile := filepath.Join(dir, "wrong-password")
	if err := os.WriteFile(passFile, []byte(kafkaTestPass+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(wrongFile, []byte("not-the-password\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	kafkaFlags := func(ca, password string) []string {
		f := []string{"--kafka-brokers", strings.Join(k.Brokers(), ","), "--kafka-tls-ca-file", ca,
			"--kafka-sasl-mechanism", "SCRAM-SHA-512", "--kafka-sasl-user", kafkaTestUser}
		if password != "" {
			f = append(f, "--kafka-sasl-password-file", password)
		}
		return f
	}

	// Refused at start, with what to fix.
	for _, tc := range []struct {
		name  string
		flags []string
		want  []string
	}{
		{"a wrong password", kafkaFlags(certs.CAFile, wrongFile), []string{"SASL authentication failed", "--kafka-sasl-user", "--kafka-sasl-password"}},
		{"an untrusted CA", kafkaFlags(certs.OtherCAFile, passFile), []string{"certificate is not trusted", "--kafka-tls-ca-file", "SLUICE_GATE_KAFKA_TLS_CA_FILE"}},
	} {
		start := time.Now()
		code, _, errOut := cliRunTimeout(t, 30*time.Second, append([]string{"gate", "--listen", "127.0.0.1:0", "--allow-no-auth"}, tc.flags...)...)
		if code == 0 {
			t.Fatalf("sluice gate with %s: exit 0", tc.name)
		}
		for _, w := range tc.want {
			if !strings.Contains(errOut, w) {
				t.Errorf("sluice gate with %s: the error lacks %q: %s", tc.name, w, errOut)
			}
		}
		if strings.Contains(errOut, "not-the-password") || strings.Contains(errOut, kafkaTestPass) {
			t.Errorf("sluice gate with %s shows a password: %s", tc.name, errOut)
		}
		if d := time.Since(start); d > 15*time.Second {
			t.Errorf("sluice gate with %s took %v to stop", tc.name, d)
		}
	}

	// The relay takes its password from the environment, the others from
	// the file.
	t.Setenv("SLUICE_RELAY_KAFKA_SASL_PASSWORD", kafkaTestPass)
	b.start(t, "relay", append([]string{"--topics", "jobs", "--lock-delay", "0s", "--commit-every", "100ms", "--durable-after", "0s"},
		kafkaFlags(certs.CAFile, "")...)...)
	gate := runPartForTest(t, "gate", append([]string{"--allow-no-auth"}, kafkaFlags(certs.CAFile, passFile)...)...)
	id := enqueueID(t, "http://"+gate+"/v1/topics/jobs/jobs", `{"type":"noop","payload":{"n":1}}`)
	testenv.WaitFor(t, 30*time.Second, "the job POSTed to the gate in Redis", func() bool {
		return redisHoldsJob(t, b, id)
	})

	console := b.start(t, "console", append([]string{"--admin-tokens", consoleTestToken + " admin"}, kafkaFlags(certs.CAFile, passFile)...)...)
	if code, body := httpGet(t, "http://"+console+"/api/v1/dlq?source=kafka&topic=jobs", consoleTestToken); code != http.StatusOK {
		t.Errorf("the console's DLQ list over SASL and TLS: %d %s", code, body)
	}
	bad := b.start(t, "console", append([]string{"--admin-tokens", consoleTestToken + " admin"}, kafkaFlags(certs.CAFile, wrongFile)...)...)
	code, body := httpGet(t, "http://"+bad+"/api/v1/dlq?source=kafka&topic=jobs", consoleTestToken)
	var e struct{ Error, Fix string }
	_ = json.Unmarshal([]byte(body), &e)
	if code != http.StatusServiceUnavailable || !strings.Contains(e.Error, "SASL authentication failed") || !strings.Contains(e.Fix, "--kafka-sasl-password") ||
		strings.Contains(body, "not-the-password") {
		t.Errorf("the console's DLQ list with a wrong password: %d %s", code, body)
	}
}

// runPartForTest runs `sluice <part> --listen <free port> args...` in process
// until the test ends, and returns its address once /healthz answers.
func runPartForTest(t *testing.T, part string, args ...string) string {
	t.Helper()
	return runPartProbed(t, part, func(addr string) int {
		code, _ := httpGet(t, "http://"+addr+"/healthz", "")
		return code
	}, args...)
}

// cliRunTimeout is cliRun for a command that should end by itself: it
// fails the test if it has not within d.
func cliRunTimeout(t *testing.T, d time.Duration, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var out, errOut testenv.LogBuffer
	code := run(ctx, args, &out, &errOut)
	if ctx.Err() != nil {
		t.Fatalf("sluice %s did not end within %v: %s", strings.Join(args, " "), d, errOut.String())
	}
	return code, out.String(), errOut.String()
}

// redisHoldsJob reports whether a lane of topic jobs in the bed's Redis
// holds the job id (no worker runs: a relayed job waits there).
func redisHoldsJob(t *testing.T, b *consoleBed, id string) bool {
	t.Helper()
	ctx := context.Background()
	rc := b.redis.Client()
	iter := rc.Scan(ctx, 0, "sluice:{test:jobs:p*}:lane:*", 1000).Iterator()
	for iter.Next(ctx) {
		if typ, _ := rc.Type(ctx, iter.Val()).Result(); typ != "list" {
			continue
		}
		entries, err := rc.LRange(ctx, iter.Val(), 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if pe, err := queue.ParseEntry(e); err == nil && pe.ID == id {
				return true
			}
		}
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return false
}
