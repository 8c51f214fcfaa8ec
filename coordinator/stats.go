package coordinator

import (
	"context"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/internal/queue"
)

// observe exports, every StatsEvery while the coordinator holds its lock,
// what each queue partition holds (in flight, delayed, dead; labelled by
// topic and partition) and the stage funnel of every topic summed over the
// partitions (queue.Pool.Funnel), for dashboards and alerts. The topics
// are read from the registry each time. The gauges go when it stops: a
// standby shows none.
func (c *Coordinator) observe(ctx context.Context, valid func() bool) {
	defer c.m.resetObserved()
	t := time.NewTicker(c.cfg.StatsEvery)
	defer t.Stop()
	failing := false
	for {
		if !valid() {
			return
		}
		stages := map[[2]string]int64{}
		topics, err := c.topics(ctx)
		for _, topic := range topics {
			for part := range c.cfg.Partitions {
				var f queue.PartitionFunnel
				if f, err = c.pool.Funnel(ctx, queue.Queue{Topic: topic, Part: part}); err != nil {
					break
				}
				label := strconv.Itoa(part)
				c.m.inflight.WithLabelValues(topic, label).Set(float64(f.Inflight))
				c.m.delayed.WithLabelValues(topic, label).Set(float64(f.Delayed))
				c.m.dead.WithLabelValues(topic, label).Set(float64(f.Dead))
				for t, s := range f.Milestones {
					for stage, n := range s {
						stages[[2]string{t, stage}] += n
					}
				}
			}
			if err != nil {
				break
			}
		}
		switch {
		case err != nil && ctx.Err() == nil:
			c.m.redisErrors.Inc()
			if !failing {
				c.log.Warn("reading the queues' funnels failed; retrying next cycle", "err", err)
				failing = true
			}
		case err == nil:
			failing = false
			for k, n := range stages {
				c.m.funnel.WithLabelValues(k[0], k[1]).Set(float64(n))
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
