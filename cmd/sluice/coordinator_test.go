package main

import (
	"bytes"
	"context"
	"flag"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/coordinator"
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
	cfg := coordinator.DefaultConfig()
	cfg.RegisterFlags(fs)
	if err := cli.Parse(fs, "coordinator", []string{"--callback-max-attempts", "3", "--scale-every", "1s", "--scale-half-life", "30s"}); err != nil {
		t.Fatal(err)
	}
	if cfg.CallbackBackoff != 250*time.Millisecond || cfg.Partitions != 4 || cfg.CallbackMaxAttempts != 3 {
		t.Fatalf("parsed %+v", cfg)
	}
	if s := cfg.Scaling; cfg.ScaleEvery != time.Second || s.Base != 2 || s.Limit() != 16 || s.HalfLife != 30*time.Second || s.Threshold != 100 || s.Cycles != 3 {
		t.Fatalf("scaling flags: every %s, %+v", cfg.ScaleEvery, s)
	}
	for _, bad := range []func(*coordinator.Config){
		func(c *coordinator.Config) { c.PartitionAddrs = map[int]string{9: "host:1"} },
		func(c *coordinator.Config) { c.CallbackMaxBackoff = time.Millisecond },
		func(c *coordinator.Config) { c.Scaling.Base = 0 },
	} {
		c := cfg
		bad(&c)
		if _, err := coordinator.New(c, slog.New(slog.DiscardHandler)); err == nil {
			t.Errorf("coordinator config %+v accepted", c)
		}
	}
	// The library's error names the field; sluice coordinator adds the
	// flag and the variable that set it.
	errOut.Reset()
	code := run(context.Background(), []string{"coordinator", "--listen", "127.0.0.1:0", "--redis-partition-addrs", "9=host:1"}, &out, &errOut)
	if want := "Config.PartitionAddrs: partition 9 out of range 0..3 (set by --redis-partition-addrs / SLUICE_COORDINATOR_REDIS_PARTITION_ADDRS)"; code != 1 || !strings.Contains(errOut.String(), want) {
		t.Errorf("a partition out of range: exit %d, %q; want %q", code, errOut.String(), want)
	}
}
