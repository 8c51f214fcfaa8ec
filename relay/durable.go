package relay

import (
	"context"
	"errors"
	"sync"
	"time"
)

// errRedisRestarted ends a topic's relaying when Redis restarted under
// writes that were not yet durable: the relay goes on from the committed
// offsets (relay.go).
var errRedisRestarted = errors.New("Redis restarted under writes not yet durable")

// durableMarks holds a topic's settled offsets until Redis's writes before
// them are durable, and only then marks them for commit.
//
// Why: a committed offset lets Kafka forget the jobs before it, and Redis
// answers before its disk has them. With AOF and appendfsync everysec (what
// sluice dev and the compose stack run) a host that fails loses the last
// second or two of acknowledged writes; had the relay committed their
// offsets, those jobs would be gone for good, the loss Kafka in front
// exists to prevent. So an offset is marked only once every write before it
// has lived DurableAfter in one Redis life: the pool's Epoch (the servers'
// run_ids) unchanged since the write, so no restart came in between, and
// Redis fsynced meanwhile. If the epoch changed under pending marks, the
// relay relays again from the committed offsets: writes Redis kept are
// deduplicated by job id, lost ones are written again.
type durableMarks struct {
	after time.Duration
	now   func() time.Time

	mu    sync.Mutex
	epoch string // the last epoch seen: every pending mark was made under it
	parts map[int32]*partMarks
}

type partMarks struct {
	mark    func(offset int64) // the offset manager's MarkOffset
	close   func()             // its AsyncClose, after the last commit
	pending []pendingMark      // oldest first
}

type pendingMark struct {
	offset int64
	at     time.Time
}

func newDurableMarks(after time.Duration, epoch string, now func() time.Time) *durableMarks {
	return &durableMarks{after: after, now: now, epoch: epoch, parts: map[int32]*partMarks{}}
}

// track returns partition p's mark function for relayPartition: it holds
// each offset back until it is durable (at once when after is 0). close
// releases the partition's offset manager; closeAll calls it once the last
// marks are committed.
func (d *durableMarks) track(p int32, mark func(int64), close func()) func(int64) {
	pm := &partMarks{mark: mark, close: close}
	d.mu.Lock()
	d.parts[p] = pm
	d.mu.Unlock()
	return func(offset int64) {
		if d.after <= 0 {
			mark(offset)
			return
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		pm.pending = append(pm.pending, pendingMark{offset: offset, at: d.now()})
	}
}

// settle takes a fresh epoch: it reports false when marks are pending and
// the epoch moved (Redis restarted; their writes may be lost; the topic
// then ends, so d is not used again). Otherwise it marks every offset whose
// writes are at least after old and keeps the rest pending. Pending marks
// all carry d.epoch: it moves only when none is pending.
func (d *durableMarks) settle(epoch string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if epoch != d.epoch {
		for _, pm := range d.parts {
			if len(pm.pending) > 0 {
				return false
			}
		}
	}
	d.epoch = epoch
	cutoff := d.now().Add(-d.after)
	for _, pm := range d.parts {
		n := 0
		for n < len(pm.pending) && !pm.pending[n].at.After(cutoff) {
			n++
		}
		if n > 0 {
			pm.mark(pm.pending[n-1].offset)
			pm.pending = append(pm.pending[:0], pm.pending[n:]...)
		}
	}
	return true
}

// closeAll releases every partition's offset manager: after the last
// commit, so that marks settled on the way out are not dropped with them.
func (d *durableMarks) closeAll() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, pm := range d.parts {
		pm.close()
	}
}

// settleDurable reads the pool's epoch and settles d by it; it reports
// whether Redis restarted under pending marks. Unreachable Redis settles
// nothing: no write becomes durable while nobody can tell.
func (r *Relay) settleDurable(ctx context.Context, d *durableMarks) (restarted bool) {
	if d.after <= 0 {
		return false
	}
	epoch, err := r.pool.Epoch(ctx)
	if err != nil {
		return false
	}
	return !d.settle(epoch)
}

// currentEpoch waits until Redis tells its epoch (a relay cannot write
// before that anyway).
func (r *Relay) currentEpoch(ctx context.Context, warn func(error)) (string, error) {
	for failures := 0; ; {
		epoch, err := r.pool.Epoch(ctx)
		if err == nil {
			return epoch, nil
		}
		if failures == 0 {
			warn(err)
		}
		if err := waitBackoff(ctx, &failures); err != nil {
			return "", err
		}
	}
}
