package chaos

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// With appendfsync everysec Redis answers a write before its AOF has it
// whenever the previous second's fsync is still running (a busy disk): it
// holds the AOF's write(2) back for up to 2 s, so a SIGKILL then loses
// writes Redis answered, the workers' records of keyed runs among them.
// The bed cannot prevent that (a host failure loses the same tail), but it
// can measure it: aofProbe writes a sequence number to Redis every
// probeEvery, and after a restart the number Redis kept tells from when on
// answered writes were lost.
const (
	probeKey   = "chaos:aof-probe"
	probeEvery = 10 * time.Millisecond
	probeKeep  = 5 * time.Second // the writes remembered: more than Redis can hold back
)

// probeWrite is one SET of the probe: its number and when it was sent.
type probeWrite struct {
	seq  int64
	sent time.Time
	ok   bool // Redis answered OK
}

type aofProbe struct {
	rdb    *redis.Client
	mu     sync.Mutex
	writes []probeWrite // the last probeKeep, oldest first
	seq    int64
	held   bool // from the stop until measured after the restart
}

// hold stops the writes until resume: a write after the restart would
// hide what Redis kept.
func (p *aofProbe) hold() { p.mu.Lock(); p.held = true; p.mu.Unlock() }

func (p *aofProbe) resume() { p.mu.Lock(); p.held = false; p.mu.Unlock() }

// startAOFProbe writes to addr until the test ends.
func startAOFProbe(t testing.TB, addr string) *aofProbe {
	p := &aofProbe{rdb: redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond,
		ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond})}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done; p.rdb.Close() })
	go func() {
		defer close(done)
		tick := time.NewTicker(probeEvery)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			p.mu.Lock()
			if p.held {
				p.mu.Unlock()
				continue
			}
			p.seq++
			w := probeWrite{seq: p.seq, sent: time.Now()}
			p.mu.Unlock()
			w.ok = p.rdb.Set(ctx, probeKey, w.seq, 0).Err() == nil
			p.mu.Lock()
			p.writes = append(p.writes, w)
			if cut := sort.Search(len(p.writes), func(i int) bool { return time.Since(p.writes[i].sent) < probeKeep }); cut > 0 {
				p.writes = slices.Delete(p.writes, 0, cut)
			}
			p.mu.Unlock()
		}
	}()
	return p
}

// aofLoss is what a restart of Redis lost of the writes it had answered.
type aofLoss struct {
	from time.Time // writes answered after it may be lost; zero: none was
	lost int       // the probe's answered writes lost
	span time.Duration
}

// measure reads the number Redis kept after its restart and compares it
// with the answered writes.
func (p *aofProbe) measure(ctx context.Context) (aofLoss, error) {
	v, err := p.rdb.Get(ctx, probeKey).Result()
	kept := int64(0)
	switch {
	case err == redis.Nil:
	case err != nil:
		return aofLoss{}, fmt.Errorf("reading the AOF probe: %w", err)
	default:
		if kept, err = strconv.ParseInt(v, 10, 64); err != nil {
			return aofLoss{}, fmt.Errorf("the AOF probe holds %q: %w", v, err)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return lossOf(p.writes, kept), nil
}

// lossOf: Redis executes and logs writes in order, so every write it
// answered before the kept SET was sent is kept, and a write answered
// after that may be lost if a later answered SET was. When the kept SET
// is older than the remembered ones, the loss began before them: from is
// then the first remembered SET's time, the earliest the bed can vouch
// for (a narrower excuse, never a wider one).
func lossOf(writes []probeWrite, kept int64) aofLoss {
	var l aofLoss
	for _, w := range writes {
		if w.ok && w.seq > kept {
			l.lost++
		}
	}
	if l.lost == 0 {
		return aofLoss{}
	}
	l.from = writes[0].sent
	if k := slices.IndexFunc(writes, func(x probeWrite) bool { return x.seq == kept }); k >= 0 {
		l.from = writes[k].sent
	}
	for _, w := range writes {
		if w.ok && w.seq > kept {
			l.span = w.sent.Sub(l.from)
		}
	}
	return l
}

// rerunAfterAOFLoss says whether every 2xx run of a key but the last may
// have lost its record with the AOF tail a SIGKILL took: the run's record
// was due after the loss began (recordDeadline after from), the run began
// before the kill, and the next began after Redis was up again. At least
// once, as after a host failure (docs/chaos.md).
func rerunAfterAOFLoss(b *bed, runs []execution) bool {
	sort.Slice(runs, func(i, k int) bool { return runs[i].At.Before(runs[k].At) })
	b.mu.Lock()
	outs := slices.Clone(b.outages)
	b.mu.Unlock()
	for i, r := range runs[:len(runs)-1] {
		next := runs[i+1]
		if !slices.ContainsFunc(outs, func(o outage) bool {
			return o.loss.lost > 0 && r.At.Before(o.down) && !o.up.IsZero() && next.At.After(o.up) &&
				b.recordDeadline(r.Answered).After(o.loss.from)
		}) {
			return false
		}
	}
	return true
}

// aofLosses describes what each restart of Redis lost, for the verdict.
func (b *bed) aofLosses() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, o := range b.outages {
		if o.loss.lost > 0 {
			out = append(out, o.loss.String())
		}
	}
	if len(out) == 0 {
		return fmt.Sprintf("no restart of Redis lost an answered write in %d outages", len(b.outages))
	}
	return strings.Join(out, "; ")
}

func (l aofLoss) String() string {
	if l.lost == 0 {
		return "no answered write lost"
	}
	return fmt.Sprintf("lost the probe's %d answered writes from %s, over %s", l.lost, l.from.Format("15:04:05.000"), l.span.Round(time.Millisecond))
}
