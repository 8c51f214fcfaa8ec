package relay

import (
	"context"
	"errors"
	"log/slog"

	"github.com/sluicehq/sluice/internal/consul"
	"github.com/sluicehq/sluice/internal/queue"
)

// raiseFence raises the topic's fence to the lease's token in every Redis
// partition of the topic, before the relay writes anything (to Redis, or
// to Kafka: offsets, dead letters, requeues). Raised only where the new
// holder wrote, the fence would leave a deposed holder that is paused
// (a GC pause, SIGSTOP, a VM migration) after it last found its lease
// valid free to write to every other partition once it resumes.
//
// While a partition cannot be fenced (its Redis is down) the relay keeps
// the lock, writes nothing, and retries with backoff; the lease's expiry
// still ends the wait. A partition holding a newer token means a newer
// holder exists, or Consul lost its state and restarted its LockIndex: it
// returns an error wrapping queue.ErrFenced, and the relay gives up the
// lock (runTopic logs why and what to do).
func (r *Relay) raiseFence(ctx context.Context, topic string, lease *consul.Lease, log *slog.Logger) error {
	failures := 0
	rw := r.redisWait("raising the fence of topic "+topic, log)
	defer rw.end()
	for {
		if !lease.Valid() {
			return errLeaseLost
		}
		err := r.pool.RaiseFence(ctx, topic, lease.Token())
		if err == nil {
			if failures > 0 {
				log.Info("fence raised in every Redis partition; relaying", "token", lease.Token())
			}
			return nil
		}
		if errors.Is(err, queue.ErrFenced) || ctx.Err() != nil {
			return err
		}
		if queue.Transient(err) {
			rw.failed(err, "") // counted in the relay's outage time
		}
		if failures == 0 {
			log.Warn("cannot raise the fence in every Redis partition of the topic: holding the lock and writing nothing until it is raised; retrying with backoff",
				"token", lease.Token(), "err", err)
		}
		r.m.redisRetries.WithLabelValues(topic).Inc()
		if err := waitBackoff(ctx, &failures); err != nil {
			return err
		}
	}
}
