package consul

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/sluicehq/sluice/internal/retry"
)

// Defaults for the LockConfig fields left zero.
const (
	// DefaultTTL is the session TTL. It is also the smallest TTL Consul
	// accepts unless its session_ttl_min is lowered.
	DefaultTTL = 10 * time.Second
	// DefaultLockDelay is how long Consul keeps a lock free after
	// invalidating its holder's session.
	DefaultLockDelay = 5 * time.Second
	// DefaultRetryWait is the wait between failed attempts to reach Consul.
	DefaultRetryWait = time.Second
)

// NoLockDelay, as LockConfig.LockDelay, asks for no lock-delay: a standby may
// take the lock the moment Consul invalidates the holder's session.
const NoLockDelay time.Duration = -1

// FlagLockDelay reads a --lock-delay flag: 0 there means none (NoLockDelay),
// not Consul's default of 15 s, which is what the api client would send.
func FlagLockDelay(d time.Duration) time.Duration {
	if d == 0 {
		return NoLockDelay
	}
	return d
}

// smallestLockDelay is what NoLockDelay is sent as. The api client leaves a
// zero LockDelay out of the session-create request, and Consul then applies
// its own default of 15s: the opposite of what was asked. 1ms is the smallest
// value that survives the trip (the client rounds to whole milliseconds, and
// Consul reads a duration under 1µs as seconds).
const smallestLockDelay = time.Millisecond

// minLockDelayPoll keeps a contender whose acquire Consul refuses during a
// lock-delay from spinning when the configured delay is tiny.
const minLockDelayPoll = 10 * time.Millisecond

var (
	// ErrLockLost is the cause when Consul no longer shows our session on
	// the lock key: the session was invalidated (TTL, destroyed, agent state
	// lost), the key was deleted or taken, or Consul could not be asked.
	ErrLockLost = errors.New("consul: lock lost")
	// ErrLeaseExpired is the cause when no session renew succeeded within
	// TTL minus Margin: Consul may be about to give the lock away without
	// being able to tell us.
	ErrLeaseExpired = errors.New("consul: lease expired: no session renew within TTL-Margin")
	// ErrReleased is the cause after Release.
	ErrReleased = errors.New("consul: lease released")
)

// LockConfig configures Acquire and Hold. Zero fields take the documented
// defaults; Client and Key are required.
type LockConfig struct {
	// Client talks to the Consul agent.
	Client *api.Client
	// Key is the lock's KV key, e.g. Key(stage, "relay", topic, "lock").
	Key string
	// Holder is written as the key's value while the lock is held, so that
	// an operator reading the key sees who holds it. Default
	// "<hostname>/<pid>".
	Holder string
	// TTL is the session's TTL. Consul promises not to invalidate a
	// session sooner than TTL after its last renew, but its timer runs
	// 2×TTL, so the lock of a holder that died frees about 2×TTL plus
	// LockDelay after its last renew. Consul refuses a TTL under its
	// session_ttl_min (10s unless configured). Default DefaultTTL (10s).
	TTL time.Duration
	// LockDelay is how long Consul refuses the lock to everyone after it
	// invalidated the holder's session, giving a deposed holder that has not
	// noticed yet time to stop. A graceful Release does not trigger it.
	// Default DefaultLockDelay (5s); NoLockDelay for none.
	LockDelay time.Duration
	// Margin: the lease is valid only while the last successful renew was
	// sent less than TTL-Margin ago. It covers the time between a Valid
	// check and the write it guards landing, and clock rate differences
	// with the Consul servers. Must be less than TTL. Default TTL/5. The
	// session is renewed three times per TTL-Margin, so one or two renewals
	// can fail without the lease lapsing.
	Margin time.Duration
	// RetryWait is the wait between failed attempts to reach Consul, and in
	// Hold before contending again after fn returned on its own. Default
	// DefaultRetryWait (1s).
	RetryWait time.Duration
	// Now is the clock that decides whether the lease is still valid.
	// Default time.Now.
	Now func() time.Time
	// Log receives state changes (acquired, lost, released, Consul
	// unreachable and back), not every retry. Default: discard.
	Log *slog.Logger
}

// resolve checks c and fills in its defaults.
func (c LockConfig) resolve() (LockConfig, error) {
	switch {
	case c.Client == nil:
		return c, errors.New("consul: LockConfig.Client is nil")
	case c.Key == "" || strings.HasPrefix(c.Key, "/"):
		return c, fmt.Errorf("consul: LockConfig.Key %q must be a non-empty key without a leading '/'", c.Key)
	case c.TTL < 0 || c.Margin < 0 || c.RetryWait < 0:
		return c, errors.New("consul: LockConfig durations must not be negative (but LockDelay)")
	}
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	if c.LockDelay == 0 {
		c.LockDelay = DefaultLockDelay
	}
	if c.Margin == 0 {
		c.Margin = c.TTL / 5
	}
	if c.Margin >= c.TTL {
		return c, fmt.Errorf("consul: LockConfig.Margin %s must be less than TTL %s", c.Margin, c.TTL)
	}
	if c.RetryWait == 0 {
		c.RetryWait = DefaultRetryWait
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Holder == "" {
		host, _ := os.Hostname()
		c.Holder = fmt.Sprintf("%s/%d", host, os.Getpid())
	}
	c.Log = c.Log.With("key", c.Key)
	return c, nil
}

// window is how long after a renew was sent the lease stays valid.
func (c *LockConfig) window() time.Duration { return c.TTL - c.Margin }

// sessionLockDelay is the LockDelay to send to Consul.
func (c *LockConfig) sessionLockDelay() time.Duration {
	if c.LockDelay < 0 {
		return smallestLockDelay
	}
	return c.LockDelay
}

// lockDelayPoll is how often a contender retries an acquire Consul refused
// while the key was free, which means a lock-delay is running. Consul does
// not say how much of it is left; the holder's delay is assumed to be ours
// (every contender for a key runs the same configuration), polled four times
// over, at most every RetryWait.
func (c *LockConfig) lockDelayPoll() time.Duration {
	return min(max(c.sessionLockDelay()/4, minLockDelayPoll), c.RetryWait)
}

// Lease is one session's claim on a lock: from Acquire until the lock is lost
// or released. It is never reused: contending again means a new session and a
// new Lease.
type Lease struct {
	cfg     LockConfig
	session string
	// ctx ends with the lease: it stops renewals, the lock monitor and
	// any wait for the lock.
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	mu        sync.Mutex
	lastRenew time.Time   // when the last successful create or renew was sent
	expiry    *time.Timer // fires at lastRenew+TTL-Margin
	acquired  bool        // an acquire was sent: the key may be ours
	held      bool        // acquired, confirmed and token read: handed out
	token     uint64
	err       error // why done is closed
	released  bool
}

// Token returns the lock's fencing token: the key's LockIndex when this lease
// acquired it. Consul raises it with every acquisition of the key, so a newer
// holder always has a larger token, and whoever receives writes (Redis) can
// reject a token older than the newest it has seen. Consul restarts it at 1
// when the key is deleted or Consul's data is lost.
func (l *Lease) Token() uint64 { return l.token }

// Done returns a channel closed once the lock is lost (Consul says so, or the
// lease expired because Consul could not be reached) or released.
func (l *Lease) Done() <-chan struct{} { return l.done }

// Valid reports whether the lock is held and the last successful session
// renew was sent less than TTL-Margin ago. It reads the clock rather than
// waiting for the expiry timer, so it is exact at the moment of the call; it
// is cheap enough to call before every write batch.
func (l *Lease) Valid() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held && l.err == nil && l.cfg.Now().Before(l.lastRenew.Add(l.cfg.window()))
}

// cause returns why the lease ended, or nil while it lasts.
func (l *Lease) cause() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Release ends the lease: it stops renewing, releases the key and destroys
// the session, in that order. Releasing first lets a standby acquire at once:
// Consul imposes the lock-delay only when it invalidates a session that still
// holds the lock, which is what destroying it first would do. Done is closed
// before anything is sent, so writers stop before the lock can change hands.
// Calling Release after the lock was lost still cleans up the session;
// calling it again does nothing.
func (l *Lease) Release(ctx context.Context) error {
	l.mu.Lock()
	if l.released {
		l.mu.Unlock()
		return nil
	}
	l.released = true
	if l.err == nil {
		l.err = ErrReleased
		close(l.done)
	}
	l.expiry.Stop()
	acquired, held := l.acquired, l.held
	l.mu.Unlock()
	l.cancel()

	var errs []error
	if acquired {
		// What api.Lock.Unlock sends, but with ctx. The release only
		// applies if our session still holds the key, so after a loss it
		// cannot free someone else's lock.
		if _, _, err := l.cfg.Client.KV().Release(l.pair(), writeOpts(ctx)); err != nil {
			errs = append(errs, fmt.Errorf("consul: releasing %s: %w", l.cfg.Key, err))
		}
	}
	// If the release failed, destroying the session still frees the key
	// now (after the lock-delay) rather than after up to 2×TTL.
	if _, err := l.cfg.Client.Session().Destroy(l.session, writeOpts(ctx)); err != nil {
		errs = append(errs, fmt.Errorf("consul: destroying session %s: %w", l.session, err))
	}
	if held {
		l.cfg.Log.Info("consul: lock released", "token", l.token, "session", l.session)
	}
	return errors.Join(errs...)
}

// lose ends the lease with cause, unless it already ended. It stops renewing
// and leaves the key and the session to Release (or to Consul's TTL).
func (l *Lease) lose(cause error) {
	l.mu.Lock()
	if l.err != nil {
		l.mu.Unlock()
		return
	}
	l.err = cause
	close(l.done)
	l.expiry.Stop()
	held := l.held
	l.mu.Unlock()
	l.cancel()
	if held {
		l.cfg.Log.Warn("consul: lock lost", "token", l.token, "session", l.session, "cause", cause)
	}
}

// discard cleans up after a failed acquisition, in the background so that
// Acquire can retry or return at once. The requests are bounded by TTL:
// by then Consul is about to expire the session on its own.
func (l *Lease) discard() {
	go func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(l.ctx), l.cfg.TTL)
		defer cancel()
		if err := l.Release(ctx); err != nil {
			l.cfg.Log.Debug("consul: cleaning up after a failed acquire", "session", l.session, "err", err)
		}
	}()
}

// pair is the lock key as api.Lock writes it: our session, the holder as
// value, and api.LockFlagValue, which api.Lock checks to tell a lock from a
// semaphore or plain data.
func (l *Lease) pair() *api.KVPair {
	return &api.KVPair{Key: l.cfg.Key, Value: []byte(l.cfg.Holder), Session: l.session, Flags: api.LockFlagValue}
}

// createSession creates the lease's own session and starts renewing it.
//
// It is a session without checks (CreateNoChecks): the default would tie it
// to the node's gossip health check, so a flapping serf link would take the
// lock away from a healthy holder, and the TTL alone would not decide. The
// behavior is "release": invalidating the session frees the key instead of
// deleting it, which keeps the key's LockIndex, and so the fencing token,
// increasing.
func createSession(ctx context.Context, cfg LockConfig) (*Lease, error) {
	// The request does not follow ctx: abandoned midway, it could leave
	// a session Consul created but we never learnt of, lingering for up
	// to 2×TTL. If ctx ends first, Acquire returns at once and the
	// session, should one come, is destroyed. A create slower than TTL is
	// given up: its session would be about to expire.
	type created struct {
		id   string
		sent time.Time
		err  error
	}
	res := make(chan created, 1)
	go func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.TTL)
		defer cancel()
		sent := cfg.Now()
		id, _, err := cfg.Client.Session().CreateNoChecks(&api.SessionEntry{
			Name:      "sluice lock " + cfg.Key + " (" + cfg.Holder + ")",
			Behavior:  api.SessionBehaviorRelease,
			TTL:       cfg.TTL.String(),
			LockDelay: cfg.sessionLockDelay(),
		}, writeOpts(rctx))
		res <- created{id, sent, err}
	}()
	var r created
	select {
	case r = <-res:
	case <-ctx.Done():
		go func() {
			if r := <-res; r.err == nil {
				dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.TTL)
				defer cancel()
				_, _ = cfg.Client.Session().Destroy(r.id, writeOpts(dctx))
			}
		}()
		return nil, ctx.Err()
	}
	if r.err != nil {
		// Consul answers 500 both for a TTL under its minimum and, on an
		// agent that just started, "Missing node registration" until
		// the node is in the catalog. Only the first is worth giving up.
		err := fmt.Errorf("consul: creating a session for %s: %w", cfg.Key, r.err)
		if invalidTTL(err) {
			err = permanent(err)
		}
		return nil, err
	}
	id, sent := r.id, r.sent
	// The lease outlives the Acquire call that created it.
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	l := &Lease{cfg: cfg, session: id, ctx: lctx, cancel: cancel, done: make(chan struct{}), lastRenew: sent}
	l.mu.Lock()
	l.expiry = time.AfterFunc(l.untilExpiry(), l.checkExpiry)
	l.mu.Unlock()
	go l.renew()
	return l, nil
}

// untilExpiry is how long the lease stays valid without another renew. The
// caller holds l.mu.
func (l *Lease) untilExpiry() time.Duration {
	return l.lastRenew.Add(l.cfg.window()).Sub(l.cfg.Now())
}

// checkExpiry runs when the expiry timer fires: the lease ends unless a renew
// moved the deadline meanwhile. This is what stops a holder that cannot reach
// Consul: nothing else will tell it, and the session may expire on the
// servers at any time after TTL.
func (l *Lease) checkExpiry() {
	l.mu.Lock()
	if l.err != nil {
		l.mu.Unlock()
		return
	}
	if left := l.untilExpiry(); left > 0 {
		l.expiry.Reset(left)
		l.mu.Unlock()
		return
	}
	l.mu.Unlock()
	l.lose(ErrLeaseExpired)
}

// renewed records a successful renew sent at sent and moves the expiry.
func (l *Lease) renewed(sent time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if sent.After(l.lastRenew) {
		l.lastRenew = sent
	}
	if l.err == nil {
		l.expiry.Reset(l.untilExpiry())
	}
}

// renew renews the session three times per validity window until the lease
// ends. The renewal time recorded is when the request was sent, not when the
// answer came: Consul restarted its timer somewhere in between, so the send
// time is the one that can only err on the safe side.
func (l *Lease) renew() {
	every := l.cfg.window() / 3
	t := time.NewTimer(every)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-t.C:
		}
		sent := l.cfg.Now()
		entry, _, err := l.cfg.Client.Session().Renew(l.session, writeOpts(l.ctx))
		if l.ctx.Err() != nil {
			return
		}
		switch {
		case err != nil:
			if !failing {
				failing = true
				level := slog.LevelWarn
				if IsDenied(err) {
					level = slog.LevelError
				}
				l.cfg.Log.Log(l.ctx, level, "consul: session renew failing; the lease lapses unless one succeeds in time",
					"session", l.session, "window", l.cfg.window(), "err", err)
			}
			t.Reset(min(every, l.cfg.RetryWait))
			continue
		case entry == nil:
			// 404: Consul invalidated the session already.
			l.lose(fmt.Errorf("%w: session %s no longer exists", ErrLockLost, l.session))
			return
		}
		if failing {
			failing = false
			l.cfg.Log.Info("consul: session renew succeeded again", "session", l.session)
		}
		l.renewed(sent)
		t.Reset(every)
	}
}

// monitor ends the lease when api.Lock's monitor closes leaderCh: it saw
// another session (or none) on the key, or could not read it.
func (l *Lease) monitor(leaderCh <-chan struct{}) {
	select {
	case <-leaderCh:
		l.lose(fmt.Errorf("%w: Consul no longer shows session %s on the key", ErrLockLost, l.session))
	case <-l.ctx.Done():
	}
}

// Acquire blocks until the lock at cfg.Key is held or ctx ends, and returns
// the lease. Consul errors are retried every RetryWait (and logged once, not
// per try); Acquire returns an error only when ctx ends or retrying cannot
// help (an invalid configuration, a TTL Consul refuses, a key holding
// something other than a lock).
//
// The caller must stop writing once Done is closed or Valid reports false,
// must put Token into every write, and must call Release when done, also
// after a loss. A lost lease is never revived: call Acquire again, which
// builds a new session and a new lock.
func Acquire(ctx context.Context, cfg LockConfig) (*Lease, error) {
	cfg, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	return acquire(ctx, cfg)
}

func acquire(ctx context.Context, cfg LockConfig) (*Lease, error) {
	failing := false
	for {
		l, err := tryAcquire(ctx, cfg)
		if err == nil {
			if failing {
				cfg.Log.Info("consul: reached Consul again")
			}
			return l, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var perm permanentError
		if errors.As(err, &perm) {
			return nil, perm.err
		}
		if !failing {
			failing = true
			if IsDenied(err) {
				// The token's to fix: said loudly, retried all the same,
				// so that a policy mended in Consul heals without a
				// restart.
				cfg.Log.Error("consul: ACL denied contending for the lock; retrying", "every", cfg.RetryWait, "err", err)
			} else {
				cfg.Log.Warn("consul: cannot contend for the lock; retrying", "every", cfg.RetryWait, "err", err)
			}
		}
		if err := retry.Sleep(ctx, cfg.RetryWait); err != nil {
			return nil, err
		}
	}
}

// tryAcquire makes one attempt with one session: it waits for the key to be
// free, takes it, and confirms it through api.Lock, whose monitor then
// watches it. Any failure discards the session; the caller starts over with a
// new one.
func tryAcquire(ctx context.Context, cfg LockConfig) (_ *Lease, err error) {
	l, err := createSession(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err == nil {
			return
		}
		// A lost session explains the failure better than what it caused
		// (ErrLeaseExpired rather than "context canceled"). Read it before
		// discard's Release records its own cause.
		var perm permanentError
		if cause := l.cause(); cause != nil && ctx.Err() == nil && !errors.As(err, &perm) {
			err = cause
		}
		l.discard()
	}()
	// Waiting ends when the caller gives up or the session is gone.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(l.ctx, cancel)()

	if err := l.contend(wctx); err != nil {
		return nil, err
	}

	// The key is ours. api.Lock with our session (never one it would create
	// itself, tied to the gossip health check and its own 15s TTL) sees that
	// and returns at once with leaderCh, which its monitor closes when the
	// key stops being ours. LockTryOnce and LockWaitTime bound the only case
	// where it would wait, the key having been taken meanwhile.
	lock, err := cfg.Client.LockOpts(&api.LockOptions{
		Key:          cfg.Key,
		Value:        []byte(cfg.Holder),
		Session:      l.session,
		LockTryOnce:  true,
		LockWaitTime: cfg.RetryWait,
	})
	if err != nil {
		return nil, permanent(fmt.Errorf("consul: lock options for %s: %w", cfg.Key, err))
	}
	stopCh := make(chan struct{})
	stopLock := context.AfterFunc(wctx, func() { close(stopCh) })
	leaderCh, err := lock.Lock(stopCh)
	stopLock()
	if err != nil {
		return nil, fmt.Errorf("consul: confirming the lock on %s: %w", cfg.Key, err)
	}
	if leaderCh == nil {
		return nil, fmt.Errorf("%w before it was confirmed", ErrLockLost)
	}

	// The fencing token is the key's LockIndex, which the api does not
	// return on acquire. A consistent read cannot be served by a stale
	// leader; the session check makes sure the index is our acquisition's.
	pair, _, err := cfg.Client.KV().Get(cfg.Key, (&api.QueryOptions{RequireConsistent: true}).WithContext(wctx))
	if err != nil {
		return nil, fmt.Errorf("consul: reading the fencing token of %s: %w", cfg.Key, err)
	}
	if pair == nil || pair.Session != l.session {
		return nil, fmt.Errorf("%w before its token was read", ErrLockLost)
	}
	l.mu.Lock()
	if l.err != nil {
		l.mu.Unlock()
		return nil, l.err
	}
	l.held, l.token = true, pair.LockIndex
	l.mu.Unlock()
	go l.monitor(leaderCh)
	cfg.Log.Info("consul: lock acquired", "token", l.token, "session", l.session, "holder", cfg.Holder)
	return l, nil
}

// contend waits until the key is free and acquires it with our session.
//
// It does what api.Lock.Lock would, for two reasons: Lock's blocking query
// ignores its stop channel for up to LockWaitTime (15s by default), so it
// cannot follow ctx, and after an acquire refused under a lock-delay it waits
// a fixed 5s (api.DefaultLockRetryTime), which turns a 1s lock-delay into a
// 5s outage and can miss a 5s one by a hair and wait 10s.
func (l *Lease) contend(ctx context.Context) error {
	kv := l.cfg.Client.KV()
	var index uint64
	refused := false
	for {
		pair, meta, err := kv.Get(l.cfg.Key, (&api.QueryOptions{WaitIndex: index}).WithContext(ctx))
		if err != nil {
			return fmt.Errorf("consul: reading lock %s: %w", l.cfg.Key, err)
		}
		if pair != nil && pair.Flags != api.LockFlagValue {
			// Taking the key would overwrite data or a semaphore.
			return permanent(fmt.Errorf("consul: key %s holds something other than a lock (flags %#x): %w",
				l.cfg.Key, pair.Flags, api.ErrLockConflict))
		}
		if pair != nil && pair.Session != "" && pair.Session != l.session {
			// Held: block until the key changes (released, or its
			// session invalidated).
			index = nextIndex(index, meta.LastIndex)
			refused = false
			continue
		}
		if refused {
			if err := retry.Sleep(ctx, l.cfg.lockDelayPoll()); err != nil {
				return err
			}
		}
		// From here on the key may be ours even if we never hear back
		// (ctx ended mid-request): Release must release it before it
		// destroys the session, or the next holder waits out the
		// lock-delay. Releasing a key we do not hold changes nothing.
		l.mu.Lock()
		l.acquired = true
		l.mu.Unlock()
		ok, _, err := kv.Acquire(l.pair(), writeOpts(ctx))
		if err != nil {
			return fmt.Errorf("consul: acquiring lock %s: %w", l.cfg.Key, err)
		}
		if ok {
			return nil
		}
		// Refused although the key looked free: another contender was
		// faster (the re-read shows its session, and we block on it), or
		// a lock-delay is running (the key is still free, and we poll).
		refused = true
		index = 0
	}
}

// Hold runs fn under the lock at cfg.Key again and again until ctx ends. Each
// round acquires the lock with a fresh session and lock, calls fn with a
// context that is cancelled as soon as the lease is lost or no longer valid
// (context.Cause tells which: ErrLockLost or ErrLeaseExpired), and releases
// the lock when fn returns. A round that ended by a loss contends again at
// once; one where fn returned on its own (its error is logged) waits
// RetryWait first, giving a standby the lock. fn must return promptly once its
// context is cancelled: the lock is released only then, and until it is, a
// standby waits for the session to expire (after a lease expiry) or for fn.
//
// Hold returns nil once ctx has ended and the lock is released, and an error
// only when contending cannot succeed (see Acquire). The release after ctx
// ended is bounded by TTL, after which Consul expires the session anyway.
func Hold(ctx context.Context, cfg LockConfig, fn func(ctx context.Context, lease *Lease) error) error {
	cfg, err := cfg.resolve()
	if err != nil {
		return err
	}
	for {
		lease, err := acquire(ctx, cfg)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		lost := runHeld(ctx, cfg, lease, fn)
		if ctx.Err() != nil {
			return nil
		}
		if !lost {
			if retry.Sleep(ctx, cfg.RetryWait) != nil {
				return nil
			}
		}
	}
}

// runHeld is one round of Hold. It reports whether the lease was lost (as
// opposed to fn returning on its own).
func runHeld(ctx context.Context, cfg LockConfig, lease *Lease, fn func(context.Context, *Lease) error) (lost bool) {
	fctx, cancel := context.WithCancelCause(ctx)
	go func() {
		select {
		case <-lease.Done():
			cancel(lease.cause())
		case <-fctx.Done():
		}
	}()
	err := fn(fctx, lease)
	lostBy := lease.cause()
	cancel(ErrReleased)

	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.TTL)
	defer rcancel()
	if rerr := lease.Release(rctx); rerr != nil {
		cfg.Log.Warn("consul: releasing the lock failed; Consul frees it when the session expires", "err", rerr)
	}
	if err != nil && lostBy == nil && ctx.Err() == nil {
		cfg.Log.Warn("consul: lock holder returned an error; stepping down", "token", lease.Token(), "err", err)
	}
	return lostBy != nil
}

// permanentError marks an error retrying cannot fix.
type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

func permanent(err error) error { return permanentError{err} }

// invalidTTL reports whether Consul refused the session's TTL. Consul answers
// 500 for it, like for a server fault, so the body is the only sign.
func invalidTTL(err error) bool {
	var se api.StatusError
	return errors.As(err, &se) && strings.Contains(se.Body, "Invalid Session TTL")
}

func writeOpts(ctx context.Context) *api.WriteOptions {
	return (&api.WriteOptions{}).WithContext(ctx)
}

// nextIndex is the WaitIndex for the blocking query after one that returned
// index got, following Consul's rules for blocking queries: an index that went
// backwards (the agent restarted, or another server answered) starts over
// from 0, a plain read, since waiting on the old index would block until it
// timed out; and an index of 0, which Consul should never return, becomes 1,
// since 0 would make every query return at once.
func nextIndex(prev, got uint64) uint64 {
	switch {
	case got < prev:
		return 0
	case got == 0:
		return 1
	}
	return got
}
