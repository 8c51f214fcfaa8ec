package main

import (
	"bytes"
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/sluicehq/sluice/examples/internal/devtest"
)

// TestBulkGroupAgainstSluiceDev runs the example against `sluice dev`: the
// group's jobs run on the dev worker, and the coordinator's callback
// reaches the example's receiver with every item done.
func TestBulkGroupAgainstSluiceDev(t *testing.T) {
	dev := devtest.Start(t)
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	if err := run(ctx, []string{"--gate", dev.Gate, "--items", "50", "--wait", "45s"}, &out); err != nil {
		t.Fatalf("bulkgroup: %v\n%s", err, out.String())
	}
	t.Logf("output:\n%s", out.String())
	if !regexp.MustCompile(`(?m)^callback: group \S+: 50 items, 50 done, 0 dead, 0 cancelled$`).Match(out.Bytes()) {
		t.Fatalf("no callback with 50 done items in the output")
	}
}
