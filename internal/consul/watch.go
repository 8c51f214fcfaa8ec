package consul

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"
	"golang.org/x/time/rate"

	"github.com/sluicehq/sluice/internal/retry"
)

// Defaults for the WatchOptions fields left zero.
const (
	// DefaultWatchWait is the longest a blocking query waits for a change.
	DefaultWatchWait = time.Minute
	// DefaultWatchRate is the most queries per second one Watch sends.
	DefaultWatchRate = 10
	// DefaultWatchRetryMin is the first wait after a failed query.
	DefaultWatchRetryMin = 100 * time.Millisecond
	// DefaultWatchRetryMax caps the doubling wait between failed queries.
	DefaultWatchRetryMax = 5 * time.Second
)

// WatchOptions configures Watch. Zero fields take the documented defaults.
type WatchOptions struct {
	// WaitTime is how long one blocking query waits for a change before
	// Consul answers with the unchanged value (Consul caps it at 10 min).
	// It also bounds how long a connection that died silently (an agent
	// frozen, packets dropped) goes unnoticed: a query not answered within
	// 1.5×WaitTime is abandoned, Consul itself adding up to WaitTime/16.
	// A quiet key costs one query per WaitTime. Default DefaultWatchWait
	// (1 min).
	WaitTime time.Duration
	// Rate is the most queries per second, so that an index that keeps
	// changing (or a Consul bug answering at once) cannot make the loop
	// spin. Changes arriving faster are coalesced: fn sees the latest
	// value. Default DefaultWatchRate (10/s).
	Rate float64
	// RetryMin and RetryMax bound the wait after a failed query: it starts
	// at RetryMin and doubles up to RetryMax, with jitter so that many
	// watchers do not hit a recovering agent at once. RetryMax is also how
	// late a watcher may notice that Consul is back. Defaults
	// DefaultWatchRetryMin (100ms) and DefaultWatchRetryMax (5s).
	RetryMin, RetryMax time.Duration
	// Log receives state changes (Consul unreachable, back again, index
	// reset), not every retry. Default: discard.
	Log *slog.Logger
}

func (o WatchOptions) resolve() (WatchOptions, error) {
	if o.WaitTime < 0 || o.Rate < 0 || o.RetryMin < 0 || o.RetryMax < 0 {
		return o, errors.New("consul: WatchOptions must not be negative")
	}
	if o.WaitTime == 0 {
		o.WaitTime = DefaultWatchWait
	}
	if o.Rate == 0 {
		o.Rate = DefaultWatchRate
	}
	if o.RetryMin == 0 {
		o.RetryMin = DefaultWatchRetryMin
	}
	if o.RetryMax == 0 {
		o.RetryMax = max(DefaultWatchRetryMax, o.RetryMin)
	}
	if o.RetryMax < o.RetryMin {
		return o, fmt.Errorf("consul: WatchOptions.RetryMax %s is less than RetryMin %s", o.RetryMax, o.RetryMin)
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return o, nil
}

// Watch calls fn with the value of key once at start and then whenever it
// changes (exists=false while the key is missing), until ctx ends. It follows
// the key with blocking queries.
//
// On Consul errors it keeps the last value in force (fn is not called: a
// limit must not turn into "unlimited" because its agent went away), retries
// with capped exponential backoff, and logs when queries start failing and
// when they succeed again, not every try. fn is called only when the value or
// its existence actually changed, including across an agent restart: if the
// new agent's state differs, fn hears of it.
//
// fn runs on Watch's goroutine: while it runs, Watch does not query, so it
// should hand the value over and return. The first call happens only once
// Consul answered, which can take arbitrarily long; callers that cannot wait
// start with their own default.
//
// Watch returns nil once ctx has ended, and an error only for invalid
// arguments.
func Watch(ctx context.Context, client *api.Client, key string, opts WatchOptions, fn func(value []byte, exists bool)) error {
	if client == nil {
		return errors.New("consul: Watch needs a client")
	}
	if key == "" || strings.HasPrefix(key, "/") {
		return fmt.Errorf("consul: Watch key %q must be a non-empty key without a leading '/'", key)
	}
	opts, err := opts.resolve()
	if err != nil {
		return err
	}
	w := &keyWatch{fn: fn}
	l := newWatchLoop(opts, opts.Log.With("key", key))
	kv := client.KV()
	l.run(ctx, func(q *api.QueryOptions) (*api.QueryMeta, error) {
		pair, meta, err := kv.Get(key, q)
		if err == nil {
			w.pair = pair
		}
		return meta, err
	}, w.deliver)
	return nil
}

// keyWatch is what Watch remembers of its key.
type keyWatch struct {
	fn     func([]byte, bool)
	pair   *api.KVPair // the last answer
	called bool        // fn has been called
	value  []byte      // what fn last saw
	exists bool
}

// watchLoop is the blocking-query loop of Watch and WatchPrefix: the rate
// limit, the backoff after failed queries and the index bookkeeping.
type watchLoop struct {
	opts    WatchOptions
	log     *slog.Logger
	limiter *rate.Limiter

	index   uint64 // WaitIndex of the next query
	fails   int    // consecutive failed queries
	backoff time.Duration
}

func newWatchLoop(opts WatchOptions, log *slog.Logger) *watchLoop {
	return &watchLoop{opts: opts, log: log, limiter: rate.NewLimiter(rate.Limit(opts.Rate), 1)}
}

// run sends query until ctx ends, with the index to block on, and calls
// deliver after each successful answer (query keeps what it read for it).
func (w *watchLoop) run(ctx context.Context, query func(*api.QueryOptions) (*api.QueryMeta, error), deliver func()) {
	w.backoff = w.opts.RetryMin
	for {
		if w.limiter.Wait(ctx) != nil {
			return // ctx ended
		}
		qctx, cancel := context.WithTimeout(ctx, w.opts.WaitTime+w.opts.WaitTime/2)
		meta, err := query((&api.QueryOptions{WaitIndex: w.index, WaitTime: w.opts.WaitTime}).WithContext(qctx))
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			if w.fails == 0 {
				if IsDenied(err) {
					w.log.Error("consul: ACL denied the watch; keeping the last value and retrying", "err", err)
				} else {
					w.log.Warn("consul: watch query failing; keeping the last value", "err", err)
				}
			}
			w.fails++
			// The next answer may come from a restarted agent whose
			// index is lower than ours; a blocking query on our index
			// would hang there until WaitTime before we noticed. Start
			// the next round with a plain read.
			w.index = 0
			d := w.backoff
			w.backoff = min(2*w.backoff, w.opts.RetryMax)
			if retry.Sleep(ctx, d/2+rand.N(d/2+1)) != nil {
				return
			}
			continue
		}
		if w.fails > 0 {
			w.log.Info("consul: watch query succeeded again", "failed_queries", w.fails)
			w.fails, w.backoff = 0, w.opts.RetryMin
		}
		if meta.LastIndex < w.index {
			w.log.Info("consul: watch index went backwards; reading the key afresh",
				"index", meta.LastIndex, "previous", w.index)
		}
		w.index = nextIndex(w.index, meta.LastIndex)
		deliver()
	}
}

// deliver calls fn if the key's value or existence differs from what fn saw
// last. A blocking query also returns on changes elsewhere in the KV store's
// index, and after WaitTime with nothing new.
func (w *keyWatch) deliver() {
	pair := w.pair
	var value []byte
	exists := pair != nil
	if exists {
		value = pair.Value
	}
	if w.called && exists == w.exists && bytes.Equal(value, w.value) {
		return
	}
	w.called, w.exists, w.value = true, exists, value
	w.fn(bytes.Clone(value), exists) // fn may keep or change its copy
}
