// Package devtest starts `sluice dev`, the binary built from this checkout,
// on free loopback ports for the examples' tests: each example runs
// against the whole pipeline, as `go run ./examples/<name>` does against
// make run.
package devtest

import (
	"bytes"
	"context"
	"io"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/loadtest/scenario"
)

// Dev is a running sluice dev.
type Dev struct {
	// Gate is the gate's base URL.
	Gate string
	// Redis is a client of the stack's Redis.
	Redis *redis.Client
	log   *bytes.Buffer
}

// Start builds sluice and starts `sluice dev` with args added, stopped
// when the test ends; its output is logged if the test failed.
func Start(t *testing.T, args ...string) *Dev {
	t.Helper()
	bin := testenv.BuildSluice(t)
	var log bytes.Buffer
	d, err := scenario.StartDev(context.Background(), scenario.DevConfig{
		Bin: bin, Dir: t.TempDir(), Log: &lockedWriter{w: &log},
		Args: append([]string{"--canary-interval", "0", "--redis-aof=false"}, args...),
	})
	if err != nil {
		t.Fatalf("sluice dev: %v\n%s", err, log.String())
	}
	rdb := redis.NewClient(&redis.Options{Addr: d.Endpoints.Redis})
	t.Cleanup(func() {
		rdb.Close()
		if err := d.Stop(); err != nil {
			t.Errorf("sluice dev stopped with %v", err)
		}
		if t.Failed() {
			t.Logf("sluice dev's output:\n%s", log.String())
		}
	})
	return &Dev{Gate: d.Endpoints.Gate, Redis: rdb, log: &log}
}

// Run runs an example's run against the dev's gate (--gate is added to
// args) within timeout, fails the test with its output if it errs, and
// returns its output.
func (d *Dev) Run(t *testing.T, timeout time.Duration, run func(context.Context, []string, io.Writer) error, args ...string) []byte {
	t.Helper()
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := run(ctx, append([]string{"--gate", d.Gate}, args...), &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	t.Logf("output:\n%s", out.String())
	return out.Bytes()
}
