package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// Noop succeeds at once: for load tests and wiring checks.
var Noop = HandlerFunc(func(context.Context, *Job) ([]byte, error) { return nil, nil })

// Sleep waits for the payload's duration, {"ms": 250} or {"duration": "250ms"},
// then succeeds: a stand-in for real work in load tests. It returns early
// with the context's error when the attempt is cancelled.
var Sleep = HandlerFunc(func(ctx context.Context, j *Job) ([]byte, error) {
	var p struct {
		MS       float64 `json:"ms"`
		Duration string  `json:"duration"`
	}
	if len(j.Payload) > 0 {
		if err := json.Unmarshal(j.Payload, &p); err != nil {
			return nil, Permanent(fmt.Errorf("sleep: payload: want {\"ms\": N} or {\"duration\": \"1s\"}: %v", err))
		}
	}
	d := time.Duration(p.MS * float64(time.Millisecond))
	if p.Duration != "" {
		var err error
		if d, err = time.ParseDuration(p.Duration); err != nil {
			return nil, Permanent(fmt.Errorf("sleep: duration %q: %v", p.Duration, err))
		}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
})
