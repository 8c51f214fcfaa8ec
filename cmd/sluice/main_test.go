package main

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/worker"
)

func TestCommandLine(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"nope"}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), `unknown command "nope"`) {
		t.Fatalf("unknown command: exit %d, %q", code, errOut.String())
	}
	out.Reset()
	if code := run(context.Background(), []string{"gate", "--help"}, &out, &errOut); code != 0 {
		t.Fatalf("gate --help: exit %d", code)
	}
	for _, want := range []string{"--kafka-brokers", "SLUICE_GATE_KAFKA_BROKERS", "--tokens-file", "--max-body-bytes", "(default 1048576)"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("gate --help lacks %q:\n%s", want, out.String())
		}
	}
	errOut.Reset()
	if code := run(context.Background(), []string{"gate", "--no-such-flag"}, &out, &errOut); code != 2 {
		t.Fatalf("bad flag: exit %d", code)
	}
	t.Setenv("SLUICE_GATE_MAX_BATCH_JOBS", "many")
	errOut.Reset()
	if code := run(context.Background(), []string{"gate"}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "SLUICE_GATE_MAX_BATCH_JOBS") {
		t.Fatalf("bad environment value: exit %d, %q", code, errOut.String())
	}
}

func TestWorkerHandlerFlags(t *testing.T) {
	for _, bad := range []builtinHandlers{
		{handle: "a=unknown"}, {handle: "noequals"}, {http: "a=ftp://x"}, {other: "http"},
	} {
		w, err := worker.New(worker.DefaultConfig(), slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		if err := bad.apply(w); err == nil {
			t.Errorf("worker handler flags %+v accepted", bad)
		}
	}
}

func TestCanaryAndStatsCommandLines(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"canary", "--help"}, &out, &errOut); code != 0 {
		t.Fatalf("canary --help: exit %d", code)
	}
	for _, want := range []string{"--canary-topics", "SLUICE_CANARY_CANARY_INTERVAL", "(default 1m0s)", "--canary-webhook"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("canary --help lacks %q", want)
		}
	}
	errOut.Reset()
	if code := run(context.Background(), []string{"canary"}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "--canary-topics") {
		t.Errorf("canary without topics: exit %d, %q", code, errOut.String())
	}
	errOut.Reset()
	if code := run(context.Background(), []string{"canary", "--canary-topics", "jobs", "--canary-interval", "500ms"}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "1s or more") {
		t.Errorf("canary interval under 1s: exit %d, %q", code, errOut.String())
	}
	out.Reset()
	if code := run(context.Background(), []string{"coordinator", "--help"}, &out, &errOut); code != 0 || !strings.Contains(out.String(), "--canary-topics") || !strings.Contains(out.String(), "--stats-every") {
		t.Errorf("coordinator --help: exit %d, lacks the canary or stats flags", code)
	}
	errOut.Reset()
	if code := run(context.Background(), []string{"stats", "-o", "yaml"}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "want text or json") {
		t.Errorf("stats -o yaml: exit %d, %q", code, errOut.String())
	}
	errOut.Reset()
	if code := run(context.Background(), []string{"stats", "--redis-addr", "127.0.0.1:1", "--timeout", "2s"}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "check --redis-addr") {
		t.Errorf("stats without Redis: exit %d, %q", code, errOut.String())
	}
}

func TestHTTPHandlersFlag(t *testing.T) {
	got, err := parseHTTPHandlers(" email=https://mail.internal/send?a=b=c , sms=http://127.0.0.1:9000/sms,")
	if err != nil {
		t.Fatalf("parseHTTPHandlers: %v", err)
	}
	want := map[string]string{
		"email": "https://mail.internal/send?a=b=c",
		"sms":   "http://127.0.0.1:9000/sms",
	}
	if len(got) != len(want) {
		t.Fatalf("got %d handlers, want %d: %v", len(got), len(want), got)
	}
	for typ, u := range want {
		if h := got[typ]; h == nil || h.URL != u || h.Client != nil || h.Header != nil {
			t.Errorf("%s: got %+v, want URL %s", typ, h, u)
		}
	}
	if m, err := parseHTTPHandlers(""); err != nil || len(m) != 0 {
		t.Errorf(`parseHTTPHandlers("") = %v, %v; want empty map`, m, err)
	}

	for _, c := range []struct{ spec, want string }{
		{"email", "want TYPE=URL"},
		{"=http://a/", "empty job type"},
		{"email=", "empty URL"},
		{"e mail=http://a/", "whitespace"},
		{"email=http://a/,email=http://b/", "more than once"},
		{"email=/relative/path", "not absolute"},
		{"email=mail.internal/send", "not absolute"},
		{"email=ftp://a/", `scheme "ftp"`},
		{"email=http:///nohost", "no host"},
		{"email=http://:80/", "no host"},
		{"email=http://us:pw@[::1/x", "invalid URL"},
	} {
		_, err := parseHTTPHandlers(c.spec)
		if err == nil {
			t.Errorf("parseHTTPHandlers(%q): no error", c.spec)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("parseHTTPHandlers(%q) = %v; want it to mention %q", c.spec, err, c.want)
		}
		if strings.Contains(err.Error(), "pw@") {
			t.Errorf("parseHTTPHandlers(%q) leaks the password: %v", c.spec, err)
		}
	}
}
