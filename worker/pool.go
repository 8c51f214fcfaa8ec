package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"

	"github.com/redis/go-redis/v9"
)

// slots is a partition's resizable pool: how many jobs may run at once.
// Resizing down lets running jobs finish; no new ones start until the
// count is under the new limit.
type slots struct {
	mu      sync.Mutex
	limit   int
	used    int
	changed chan struct{} // closed at every release and resize
}

func newSlots(limit int) *slots { return &slots{limit: limit, changed: make(chan struct{})} }

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
	s.used++
	s.mu.Unlock()
}

func (s *slots) release() {
	s.mu.Lock()
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

// MaxWorkersPerPartition bounds SetWorkers: a typo must not start a
// million goroutines.
const MaxWorkersPerPartition = 10000

// SetWorkers resizes partition part's pool to n and checkpoints n in Redis,
// so a restarted worker resumes with it. The coordinator drives it through
// the partition's command list.
func (w *Worker) SetWorkers(ctx context.Context, part, n int) error {
	if n < 1 || n > MaxWorkersPerPartition {
		return fmt.Errorf("workers %d: want 1..%d", n, MaxWorkersPerPartition)
	}
	w.mu.RLock()
	s, ok := w.pools[part]
	w.mu.RUnlock()
	if !ok {
		return fmt.Errorf("partition %d is not served here", part)
	}
	if err := w.pool.Client(part).Set(ctx, w.pool.Layout().Keys(part).WorkerCount(), n, 0).Err(); err != nil {
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
	n, err := w.pool.Client(part).Get(ctx, w.pool.Layout().Keys(part).WorkerCount()).Int()
	if err != nil || n < 1 || n > MaxWorkersPerPartition {
		if err != nil && err != redis.Nil {
			w.log.Warn("reading the checkpointed worker count failed; using the configured one", "partition", part, "err", err)
		}
		return fallback
	}
	return n
}

// Command is a coordinator command on a partition's command list (DESIGN:
// {"type":"SCALE_UP","partition":2,"targetWorkers":24,"reason":"..."}).
type Command struct {
	Type          string `json:"type"`
	Partition     int    `json:"partition"`
	TargetWorkers int    `json:"targetWorkers"`
	Reason        string `json:"reason"`
}

// apply carries out a command read from part's command list.
func (w *Worker) apply(ctx context.Context, part int, raw string) {
	var c Command
	if err := json.Unmarshal([]byte(raw), &c); err != nil {
		w.log.Error("ignoring an unreadable coordinator command", "partition", part, "command", raw, "err", err)
		return
	}
	switch c.Type {
	case "SCALE_UP", "SCALE_DOWN":
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
