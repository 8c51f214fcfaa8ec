package main

import (
	"regexp"
	"testing"
	"time"

	"github.com/sluicehq/sluice/examples/internal/devtest"
)

// TestBulkGroupAgainstSluiceDev runs the example against `sluice dev`: the
// group's jobs run on the dev worker, and the coordinator's callback
// reaches the example's receiver with every item done.
func TestBulkGroupAgainstSluiceDev(t *testing.T) {
	out := devtest.Start(t).Run(t, 50*time.Second, run, "--items", "50", "--wait", "45s")
	if !regexp.MustCompile(`(?m)^callback: group \S+: 50 items, 50 done, 0 dead, 0 cancelled$`).Match(out) {
		t.Fatalf("no callback with 50 done items in the output")
	}
}
