package main

import (
	"bytes"
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
	out := dev.Run(t, 45*time.Second, run, "--n", "5")
	ids := regexp.MustCompile(`(?m)^job (\S+): jobs partition \d+ offset \d+$`).FindAllSubmatch(out, -1)
	if len(ids) != 6 || !bytes.Contains(out, []byte("6 jobs enqueued")) {
		t.Fatalf("want 6 jobs printed, got %d", len(ids))
	}
	for _, m := range ids {
		id := string(m[1])
		testenv.WaitFor(t, 30*time.Second, "job "+id+" to be done", func() bool {
			keys, _ := dev.Redis.Keys(t.Context(), "sluice:{dev:jobs:p*}:job:"+id).Result()
			if len(keys) != 1 {
				return false
			}
			state, _ := dev.Redis.HGet(t.Context(), keys[0], "state").Result()
			return state == "done"
		})
	}
}
