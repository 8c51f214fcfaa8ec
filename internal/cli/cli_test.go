package cli

import (
	"bytes"
	"flag"
	"io"
	"strings"
	"testing"
	"time"
)

func newFlags() (*flag.FlagSet, *string, *int, *ListFlag, *time.Duration) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	s := fs.String("kafka-brokers", "default:9092", "brokers")
	n := fs.Int("max-jobs", 10, "jobs")
	var l ListFlag
	fs.Var(&l, "topics", "topics")
	var d time.Duration
	DurationVar(fs, &d, "timeout", 5*time.Second, "timeout")
	return fs, s, n, &l, &d
}

func TestEnvironmentFallbacks(t *testing.T) {
	t.Setenv("SLUICE_KAFKA_BROKERS", "shared:1")
	t.Setenv("SLUICE_GATE_MAX_JOBS", "7")
	t.Setenv("SLUICE_MAX_JOBS", "99") // the part's own variable wins
	t.Setenv("SLUICE_GATE_TOPICS", "a, b,,c")
	fs, s, n, l, d := newFlags()
	if err := Parse(fs, "gate", []string{"--timeout", "2s"}); err != nil {
		t.Fatal(err)
	}
	if *s != "shared:1" || *n != 7 || strings.Join(*l, "|") != "a|b|c" || *d != 2*time.Second {
		t.Fatalf("got brokers %q jobs %d topics %v timeout %s", *s, *n, *l, *d)
	}

	t.Setenv("SLUICE_GATE_KAFKA_BROKERS", "part:2")
	fs, s, _, _, _ = newFlags()
	if err := Parse(fs, "gate", []string{"--kafka-brokers", "flag:3"}); err != nil || *s != "flag:3" {
		t.Fatalf("the command line must win: %q %v", *s, err)
	}
	fs, s, _, _, _ = newFlags()
	if err := Parse(fs, "gate", nil); err != nil || *s != "part:2" {
		t.Fatalf("SLUICE_GATE_* must win over SLUICE_*: %q %v", *s, err)
	}
}

func TestBadEnvironmentValueNamesTheVariable(t *testing.T) {
	t.Setenv("SLUICE_RELAY_TIMEOUT", "-3s")
	fs, _, _, _, _ := newFlags()
	err := Parse(fs, "relay", nil)
	var envErr *EnvError
	if err == nil || !strings.Contains(err.Error(), "SLUICE_RELAY_TIMEOUT") || !asEnvErr(err, &envErr) {
		t.Fatalf("Parse with a negative duration in the environment: %v", err)
	}
}

func asEnvErr(err error, target **EnvError) bool {
	e, ok := err.(*EnvError)
	*target = e
	return ok
}

func TestUsageNamesEveryVariable(t *testing.T) {
	fs, _, _, _, _ := newFlags()
	Describe("gate", "The gate.")
	var b bytes.Buffer
	Usage(&b, fs, "gate")
	for _, want := range []string{"Usage: sluice gate", "The gate.", "--kafka-brokers", "SLUICE_GATE_KAFKA_BROKERS", "(default default:9092)", "SLUICE_GATE_TIMEOUT", "(default 5s)"} {
		if !strings.Contains(b.String(), want) {
			t.Fatalf("usage lacks %q:\n%s", want, b.String())
		}
	}
}

func TestLogging(t *testing.T) {
	var b bytes.Buffer
	l := Logging{Level: "warn", Format: "json"}
	log, err := l.Logger(&b)
	if err != nil {
		t.Fatal(err)
	}
	log.Info("hidden")
	log.Warn("shown", "k", 1)
	if strings.Contains(b.String(), "hidden") || !strings.Contains(b.String(), `"msg":"shown"`) {
		t.Fatalf("log output %q", b.String())
	}
	for _, bad := range []Logging{{Level: "loud", Format: "json"}, {Level: "info", Format: "xml"}} {
		if _, err := bad.Logger(&b); err == nil {
			t.Fatalf("Logger(%+v) accepted", bad)
		}
	}
}
