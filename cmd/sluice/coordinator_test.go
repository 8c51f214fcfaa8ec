package main

import (
	"bytes"
	"context"
	"flag"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/cli"
)

func TestCoordinatorFlags(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"coordinator", "--help"}, &out, &errOut); code != 0 {
		t.Fatalf("coordinator --help: exit %d", code)
	}
	for _, want := range []string{"--stage", "--redis-partition-addrs", "--consul-addr", "--callback-timeout", "SLUICE_COORDINATOR_CALLBACK_MAX_ATTEMPTS", "--keep", "(default 168h0m0s)",
		"--scale-every", "SLUICE_COORDINATOR_SCALE_HALF_LIFE", "--scale-threshold", "--consumer-ttl"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("coordinator --help lacks %q:\n%s", want, out.String())
		}
	}

	t.Setenv("SLUICE_COORDINATOR_CALLBACK_BACKOFF", "250ms")
	t.Setenv("SLUICE_REDIS_PARTITIONS", "4")
	t.Setenv("SLUICE_COORDINATOR_SCALE_BASE", "2")
	fs := flag.NewFlagSet("coordinator", flag.ContinueOnError)
	var f coordinatorFlags
	f.register(fs)
	if err := cli.Parse(fs, "coordinator", []string{"--callback-max-attempts", "3", "--scale-every", "1s", "--scale-half-life", "30s"}); err != nil {
		t.Fatal(err)
	}
	if f.cfg.CallbackBackoff != 250*time.Millisecond || f.cfg.Partitions != 4 || f.cfg.CallbackMaxAttempts != 3 {
		t.Fatalf("parsed %+v", f.cfg)
	}
	if s := f.cfg.Scaling; f.cfg.ScaleEvery != time.Second || s.Base != 2 || s.Limit() != 16 || s.HalfLife != 30*time.Second || s.Threshold != 100 || s.Cycles != 3 {
		t.Fatalf("scaling flags: every %s, %+v", f.cfg.ScaleEvery, s)
	}
	for _, bad := range []func(){
		func() { f.partitionAddrs = "9=host:1" },
		func() { f.partitionAddrs = ""; f.cfg.CallbackMaxBackoff = time.Millisecond },
		func() { f.cfg.CallbackMaxBackoff = time.Hour; f.cfg.Scaling.Base = 0 },
	} {
		bad()
		if _, err := f.build(slog.New(slog.DiscardHandler)); err == nil {
			t.Errorf("coordinator flags %+v accepted", f)
		}
	}
}
