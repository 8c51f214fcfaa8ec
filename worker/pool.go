package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/queue"
)

// slots is a partition's resizable pool: how many jobs may run at once.
// Resizing down lets running jobs finish; no new ones start until the
// count is under the new limit.
type slots struct {
	mu      sync.Mutex
	limit   int
	used    int
	changed chan struct{} // closed at every release and resize
	// busy is the integral of used over time up to since: the heartbeat
	// reports it, so that the coordinator sees how many workers the load
	// keeps busy, not only how many there are.
	busy  time.Duration
	since time.Time
	// id names this consumer in its partition's heartbeats.
	id string
	// listening: the consumer blocks on its partition's command and wake
	// lists now (waitForWork), so a command reaches it there and the
	// maintainer need not pop the command list too.
	listening atomic.Bool
	// resizing serialises the two writers of limit that read Redis first
	// (a command's SetWorkers, the heartbeat following the checkpoint), so
	// that a stale read cannot undo a newer resize.
	resizing sync.Mutex
}

func newSlots(limit int) *slots {
	host, _ := os.Hostname()
	return &slots{
		limit: limit, changed: make(chan struct{}), since: time.Now(),
		id: fmt.Sprintf("%s/%d/%08x", host, os.Getpid(), rand.Uint32()),
	}
}

// account adds the busy time since the last change. Under s.mu.
func (s *slots) account() {
	now := time.Now()
	s.busy += time.Duration(s.used) * now.Sub(s.since)
	s.since = now
}

// busyTime is the slots' busy time since they were made.
func (s *slots) busyTime() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.account()
	return s.busy
}

func (s *slots) signal() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// free returns the free slots now, and a channel closed at the next change.
func (s *slots) free() (int, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return max(s.limit-s.used, 0), s.changed
}

func (s *slots) take() {
	s.mu.Lock()
	s.account()
	s.used++
	s.mu.Unlock()
}

func (s *slots) release() {
	s.mu.Lock()
	s.account()
	s.used--
	s.signal()
	s.mu.Unlock()
}

// poke wakes whoever waits on free's channel: the room to claim grew.
func (s *slots) poke() {
	s.mu.Lock()
	s.signal()
	s.mu.Unlock()
}

func (s *slots) resize(n int) {
	s.mu.Lock()
	s.limit = n
	s.signal()
	s.mu.Unlock()
}

func (s *slots) size() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.limit
}

// SetWorkers resizes partition part's pool to n and checkpoints n in Redis,
// so a restarted worker resumes with it. The coordinator drives it through
// the partition's command list.
func (w *Worker) SetWorkers(ctx context.Context, part, n int) error {
	if n < 1 || n > queue.MaxWorkers {
		return fmt.Errorf("workers %d: want 1..%d", n, queue.MaxWorkers)
	}
	w.mu.RLock()
	s, ok := w.pools[part]
	w.mu.RUnlock()
	if !ok {
		return fmt.Errorf("partition %d is not served here", part)
	}
	s.resizing.Lock()
	defer s.resizing.Unlock()
	if err := w.pool.CheckpointWorkers(ctx, part, n); err != nil {
		return fmt.Errorf("checkpointing the worker count: %w", err)
	}
	s.resize(n)
	w.m.workers.WithLabelValues(strconv.Itoa(part)).Set(float64(n))
	w.log.Info("worker count changed", "partition", part, "workers", n)
	return nil
}

// Workers is partition part's pool size now (0 if not served here).
func (w *Worker) Workers(part int) int {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if s, ok := w.pools[part]; ok {
		return s.size()
	}
	return 0
}

// checkpointed is the worker count stored for part, or fallback.
func (w *Worker) checkpointed(ctx context.Context, part, fallback int) int {
	n, err := w.pool.CheckpointedWorkers(ctx, part)
	if err != nil || n < 1 || n > queue.MaxWorkers {
		if err != nil {
			w.log.Warn("reading the checkpointed worker count failed; using the configured one", "partition", part, "err", err)
		}
		return fallback
	}
	return n
}

// heartbeat publishes the pool size and busy time of this process's
// consumer of part for the coordinator's scaler, and follows the
// partition's checkpointed worker count: a command reaches one consumer of
// the partition, which checkpoints it, and the others (in other processes)
// pick it up here, within a Liveness. A failed heartbeat is left for the
// next: the consumer logs Redis trouble already.
func (w *Worker) heartbeat(ctx context.Context, part int) {
	w.beat(part, func(b queue.ConsumerBeat) (int, error) {
		return w.pool.Heartbeat(ctx, part, b.Consumer, b.Workers, b.Busy)
	})
}

// beat is heartbeat with the round trip send: the maintenance round sends
// the heartbeats with its reads (queue.Pool.ReadMaintenance).
func (w *Worker) beat(part int, send func(queue.ConsumerBeat) (checkpoint int, err error)) {
	s, b := w.beginBeat(part)
	cp, err := send(b)
	w.endBeat(part, s, b, cp, err)
}

// beginBeat is the heartbeat of this process's consumer of part, its
// resizing held until endBeat: a command's resize cannot fall between the
// size sent and the checkpoint followed.
func (w *Worker) beginBeat(part int) (*slots, queue.ConsumerBeat) {
	w.mu.RLock()
	s := w.pools[part]
	w.mu.RUnlock()
	s.resizing.Lock()
	return s, queue.ConsumerBeat{Consumer: s.id, Workers: s.size(), Busy: s.busyTime()}
}

// endBeat follows the checkpoint cp that the heartbeat b answered, and
// lets resizes go on.
func (w *Worker) endBeat(part int, s *slots, b queue.ConsumerBeat, cp int, err error) {
	defer s.resizing.Unlock()
	if err != nil || cp < 1 || cp > queue.MaxWorkers || cp == b.Workers {
		return
	}
	s.resize(cp)
	w.m.workers.WithLabelValues(strconv.Itoa(part)).Set(float64(cp))
	w.log.Info("worker count follows the partition's checkpoint", "partition", part, "workers", cp, "was", b.Workers)
}

// leave takes the heartbeat of this process's consumer of part away, so
// that its workers stop counting at once rather than when it ages out.
func (w *Worker) leave(part int) {
	w.mu.RLock()
	s := w.pools[part]
	w.mu.RUnlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	w.pool.Leave(ctx, part, s.id)
}

// apply carries out a coordinator command read from part's command list
// (queue.Command: {"type":"SCALE_UP","partition":2,"targetWorkers":24,"reason":"..."}).
func (w *Worker) apply(ctx context.Context, part int, raw string) {
	var c queue.Command
	if err := json.Unmarshal([]byte(raw), &c); err != nil {
		w.log.Error("ignoring an unreadable coordinator command", "partition", part, "command", raw, "err", err)
		return
	}
	switch c.Type {
	case queue.ScaleUp, queue.ScaleDown:
		if c.Partition != part {
			w.log.Error("ignoring a command for another partition", "partition", part, "command", raw)
			return
		}
		if err := w.SetWorkers(ctx, part, c.TargetWorkers); err != nil {
			w.log.Error("coordinator command failed", "partition", part, "command", raw, "err", err)
			return
		}
		w.log.Info("coordinator command applied", "partition", part, "type", c.Type, "workers", c.TargetWorkers, "reason", c.Reason)
	default:
		w.log.Error("ignoring an unknown coordinator command", "partition", part, "command", raw)
	}
}
