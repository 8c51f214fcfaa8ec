package main

import (
	"bytes"
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/sluicehq/sluice/examples/internal/devtest"
	"github.com/sluicehq/sluice/internal/testenv"
)

// TestProducerAgainstSluiceDev runs the example against `sluice dev`: every
// job it prints is run by the dev worker (each was sent with Retain, so its
// record says done).
func TestProducerAgainstSluiceDev(t *testing.T) {
	dev := devtest.Start(t)
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	if err := run(ctx, []string{"--gate", dev.Gate, "--n", "5"}, &out); err != nil {
		t.Fatalf("producer: %v\n%s", err, out.String())
	}
	t.Logf("output:\n%s", out.String())
	ids := regexp.MustCompile(`(?m)^job (\S+): jobs partition \d+ offset \d+$`).FindAllStringSubmatch(out.String(), -1)
	if len(ids) != 6 || !bytes.Contains(out.Bytes(), []byte("6 jobs enqueued")) {
		t.Fatalf("want 6 jobs printed, got %d", len(ids))
	}
	for _, m := range ids {
		id := m[1]
		testenv.WaitFor(t, 30*time.Second, "job "+id+" to be done", func() bool {
			keys, _ := dev.Redis.Keys(ctx, "sluice:{dev:jobs:p*}:job:"+id).Result()
			if len(keys) != 1 {
				return false
			}
			state, _ := dev.Redis.HGet(ctx, keys[0], "state").Result()
			return state == "done"
		})
	}
}
