package worker

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/internal/canary"
	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/queue"
)

// canaryKeep is how long a completed canary's job hash is kept: long enough
// for the relay's dedupe of a redelivery, short enough that canaries sent
// every second do not pile up in Redis for a result TTL.
const canaryKeep = 10 * time.Minute

// completeCanary completes a heartbeat canary (internal/canary) without a
// user handler, rate limit or idempotency key: it records the canary's
// arrival on this partition, where the monitor reads it, and acks it at
// once. A canary never counts as a user job: it has a counter of its own.
// One that cannot be read is acked anyway (a canary is never retried: the
// next one is on its way) and counted as bad.
func (c *consumer) completeCanary(ctx context.Context, h *heldJob, j *job.Job) {
	w := c.w
	now := w.cfg.Now()
	outcome := "done"
	p, err := canary.DecodePayload(j.Payload)
	if err == nil {
		var recorded bool
		recorded, err = w.pool.RecordCanaryDone(ctx, c.part, p.Path().Field(), time.UnixMilli(p.SentMS), now)
		if err == nil && !recorded {
			outcome = "late" // a newer one got here first
		}
	}
	if err != nil {
		outcome = "bad"
		c.log.Warn("a canary could not be recorded", "job", h.claimed.ID, "err", err)
	}
	if _, err := w.pool.AckMany(context.WithoutCancel(ctx), h.q, []queue.Done{{Job: h.claimed}}, now, canaryKeep); err != nil {
		c.log.Warn("acking a canary failed; its lease will expire and it runs again", "job", h.claimed.ID, "err", err)
		outcome = "bad"
	}
	w.m.canaries.WithLabelValues(outcome).Inc()
}
