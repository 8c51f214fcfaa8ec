package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"testing"
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

func TestWorkerFlags(t *testing.T) {
	for in, want := range map[string]string{"": "[]", "0-3": "[0 1 2 3]", "1,5-6,1": "[1 5 6]"} {
		got, err := parsePartitionList(in, 8)
		if err != nil || fmt.Sprint(got) != want && !(want == "[]" && got == nil) {
			t.Errorf("parsePartitionList(%q) = %v %v, want %s", in, got, err, want)
		}
	}
	for _, bad := range []string{"8", "3-1", "x", "-1"} {
		if _, err := parsePartitionList(bad, 8); err == nil {
			t.Errorf("parsePartitionList(%q) accepted", bad)
		}
	}
	var f workerFlags
	f.register(flag.NewFlagSet("worker", flag.ContinueOnError))
	for _, bad := range []struct{ handle, http, other string }{
		{handle: "a=unknown"}, {handle: "noequals"}, {http: "a=ftp://x"}, {other: "http"},
	} {
		f.handle, f.http, f.other = bad.handle, bad.http, bad.other
		if _, err := f.build(slog.New(slog.DiscardHandler)); err == nil {
			t.Errorf("worker flags %+v accepted", bad)
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
