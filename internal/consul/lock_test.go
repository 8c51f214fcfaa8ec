package consul

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
)

// Tests run with Consul's smallest default session TTL (10s, its
// session_ttl_min) and a large Margin, so that a lease lapses 2s after its
// last renew instead of 8s.
const (
	testTTL    = 10 * time.Second
	testMargin = 8 * time.Second
	testWindow = testTTL - testMargin
)

func TestLockTwoContenders(t *testing.T) {
	t.Parallel()
	c := sharedConsul(t).Client()
	ctx := testCtx(t)
	key := lockKey(t)
	const delay = 2 * time.Second
	cfg := func(holder string) LockConfig {
		return LockConfig{Client: c, Key: key, Holder: holder, LockDelay: delay, RetryWait: 100 * time.Millisecond}
	}

	a, err := Acquire(ctx, cfg("a"))
	if err != nil {
		t.Fatal(err)
	}
	if !a.Valid() || a.Token() == 0 {
		t.Fatalf("fresh lease: Valid=%v Token=%d", a.Valid(), a.Token())
	}
	pair, _, err := c.KV().Get(key, nil)
	if err != nil || pair == nil || pair.Session != a.session || string(pair.Value) != "a" {
		t.Fatalf("lock key = %+v, %v; want session %s and holder a", pair, err, a.session)
	}

	bCh := acquireAsync(ctx, cfg("b"))
	// b contends (its session exists) but must not get the lock while a
	// holds it: give it time to (wrongly) succeed.
	testenv.WaitFor(t, 5*time.Second, "b's session", func() bool { return len(sessionsFor(t, c, key)) == 2 })
	select {
	case r := <-bCh:
		t.Fatalf("b acquired the lock a holds: %+v", r)
	case <-time.After(300 * time.Millisecond):
	}

	released := time.Now()
	release(t, a)
	if a.Valid() {
		t.Error("a is Valid after Release")
	}
	closedWithin(t, a.Done(), 0, "a.Done after Release")

	r := receive(t, bCh, 5*time.Second, "b to acquire")
	if r.err != nil {
		t.Fatal(r.err)
	}
	b := r.lease
	defer release(t, b)
	// A graceful release must not impose the lock-delay.
	if took := r.at.Sub(released); took >= delay/2 {
		t.Errorf("b acquired %s after a released; want well under the %s lock-delay", took, delay)
	}
	if b.Token() <= a.Token() {
		t.Errorf("b's token %d is not above a's %d", b.Token(), a.Token())
	}
	// a's session is gone, not left to expire.
	testenv.WaitFor(t, 5*time.Second, "a's session to be destroyed", func() bool {
		s, _, err := c.Session().Info(a.session, nil)
		return err == nil && s == nil
	})
}

func TestLockSessionDestroyed(t *testing.T) {
	t.Parallel()
	c := sharedConsul(t).Client()
	ctx := testCtx(t)
	key := lockKey(t)
	const delay = 500 * time.Millisecond
	log, rec := newLog()
	cfg := LockConfig{Client: c, Key: key, Holder: "a", LockDelay: delay, RetryWait: 100 * time.Millisecond, Log: log}

	// a holds the lock through Hold; its fn reports the lease, then how
	// its context ended, and stops Hold so it does not contend again.
	holdCtx, stopHold := context.WithCancel(ctx)
	defer stopHold()
	leases := make(chan *Lease, 1)
	causes := make(chan error, 1)
	holdErr := make(chan error, 1)
	go func() {
		holdErr <- Hold(holdCtx, cfg, func(ctx context.Context, l *Lease) error {
			leases <- l
			<-ctx.Done()
			causes <- context.Cause(ctx)
			stopHold()
			return ctx.Err()
		})
	}()
	a := receive(t, leases, 10*time.Second, "a to acquire")

	bcfg := cfg
	bcfg.Holder, bcfg.Log = "b", nil
	bCh := acquireAsync(ctx, bcfg)
	testenv.WaitFor(t, 5*time.Second, "b's session", func() bool { return len(sessionsFor(t, c, key)) == 2 })

	// Destroying a's session behind its back is what Consul does when
	// the TTL runs out: the key is freed, under the lock-delay.
	destroyed := time.Now()
	if _, err := c.Session().Destroy(a.session, nil); err != nil {
		t.Fatal(err)
	}
	if cause := receive(t, causes, 5*time.Second, "a's fn context to end"); !errors.Is(cause, ErrLockLost) {
		t.Errorf("a's fn context ended with %v, want ErrLockLost", cause)
	}
	closedWithin(t, a.Done(), 0, "a.Done after its session was destroyed")
	if a.Valid() {
		t.Error("a is Valid after losing its session")
	}

	r := receive(t, bCh, 10*time.Second, "b to acquire")
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer release(t, r.lease)
	took := r.at.Sub(destroyed)
	if took < delay {
		t.Errorf("b acquired %s after a's session was destroyed, inside the %s lock-delay", took, delay)
	}
	if took > delay+2*time.Second {
		t.Errorf("b acquired %s after a's session was destroyed; the lock-delay is only %s", took, delay)
	}
	if r.lease.Token() <= a.Token() {
		t.Errorf("b's token %d is not above a's %d", r.lease.Token(), a.Token())
	}
	if err := receive(t, holdErr, 5*time.Second, "Hold to return"); err != nil {
		t.Errorf("Hold returned %v, want nil after its context ended", err)
	}
	if n := rec.count("lock lost"); n != 1 {
		t.Errorf("logged %d losses, want 1", n)
	}
}

func TestLockAgentStopped(t *testing.T) {
	t.Parallel()
	srv := testenv.Consul(t)
	ctx := testCtx(t)
	cfg := LockConfig{Client: srv.Client(), Key: lockKey(t), TTL: testTTL, Margin: testMargin, RetryWait: 100 * time.Millisecond}

	leases, causes, holdErr, stopHold := holdUntilLost(ctx, cfg)
	defer stopHold()
	l := receive(t, leases, 10*time.Second, "the lock")

	srv.Stop()
	stopped := time.Now()
	cause := receive(t, causes, testTTL, "fn's context to end with the agent stopped")
	t.Logf("lease ended %s after the agent stopped: %v", time.Since(stopped), cause)
	if !errors.Is(cause, ErrLockLost) && !errors.Is(cause, ErrLeaseExpired) {
		t.Errorf("fn's context ended with %v, want a loss", cause)
	}
	if l.Valid() {
		t.Error("lease Valid with the agent stopped")
	}
	// Hold keeps trying to contend; it must still return promptly.
	stopHold()
	if err := receive(t, holdErr, 5*time.Second, "Hold to return"); err != nil {
		t.Errorf("Hold returned %v", err)
	}
}

// With every request to Consul hanging, nothing tells the holder that it
// lost anything: only its own clock can.
func TestLockUnreachable(t *testing.T) {
	t.Parallel()
	proxy := newBlackhole(t, sharedConsul(t).Addr())
	ctx := testCtx(t)
	cfg := LockConfig{Client: proxy.client(t), Key: lockKey(t), TTL: testTTL, Margin: testMargin, RetryWait: 100 * time.Millisecond}

	leases, causes, holdErr, stopHold := holdUntilLost(ctx, cfg)
	defer stopHold()
	l := receive(t, leases, 10*time.Second, "the lock")

	// Let renewals carry the lease first, so that it expires counting
	// from a renew rather than from its creation.
	created := lastRenew(l)
	testenv.WaitFor(t, testTTL, "renewals", func() bool { return lastRenew(l).Sub(created) >= testWindow/2 })
	if !l.Valid() {
		t.Fatal("lease not Valid while renewals succeed")
	}

	proxy.Freeze()
	frozen := time.Now()
	cause := receive(t, causes, testTTL, "fn's context to end with Consul silent")
	took := time.Since(frozen)
	if !errors.Is(cause, ErrLeaseExpired) {
		t.Errorf("fn's context ended with %v, want ErrLeaseExpired", cause)
	}
	if l.Valid() {
		t.Error("lease Valid after it expired")
	}
	// The last renew went out at most a renew interval (window/3) before
	// the freeze, and the lease lasts window after it.
	if lo, hi := testWindow-testWindow/3-100*time.Millisecond, testWindow+time.Second; took < lo || took > hi {
		t.Errorf("lease expired %s after Consul went silent, want between %s and %s", took, lo, hi)
	}

	// Connections fail again instead of hanging, so Hold's release and
	// its next attempt end quickly.
	proxy.Close()
	stopHold()
	if err := receive(t, holdErr, 5*time.Second, "Hold to return"); err != nil {
		t.Errorf("Hold returned %v", err)
	}
}

func TestLockTokensIncrease(t *testing.T) {
	t.Parallel()
	c := sharedConsul(t).Client()
	ctx := testCtx(t)
	cfg := LockConfig{Client: c, Key: lockKey(t), RetryWait: 10 * time.Millisecond}

	var last uint64
	for i := range 3 {
		l, err := Acquire(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if l.Token() <= last {
			t.Errorf("acquisition %d: token %d, previous %d", i, l.Token(), last)
		}
		last = l.Token()
		release(t, l)
	}

	// Hold contends again after each round, each time with a new session.
	holdCtx, stopHold := context.WithCancel(ctx)
	defer stopHold()
	sessions := map[string]bool{}
	rounds := 0
	err := Hold(holdCtx, cfg, func(ctx context.Context, l *Lease) error {
		if l.Token() <= last {
			t.Errorf("Hold round %d: token %d, previous %d", rounds, l.Token(), last)
		}
		if sessions[l.session] {
			t.Errorf("Hold round %d reused session %s", rounds, l.session)
		}
		sessions[l.session] = true
		last = l.Token()
		if rounds++; rounds == 3 {
			stopHold()
		}
		return nil
	})
	if err != nil || rounds != 3 {
		t.Fatalf("Hold = %v after %d rounds", err, rounds)
	}
	testenv.WaitFor(t, 5*time.Second, "every session to be destroyed", func() bool { return len(sessionsFor(t, c, cfg.Key)) == 0 })
}

// The api client drops a zero LockDelay and Consul applies 15s: NoLockDelay
// must really mean an immediate takeover.
func TestLockNoLockDelay(t *testing.T) {
	t.Parallel()
	c := sharedConsul(t).Client()
	ctx := testCtx(t)
	cfg := LockConfig{Client: c, Key: lockKey(t), LockDelay: NoLockDelay, RetryWait: 100 * time.Millisecond}

	a, err := Acquire(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer release(t, a)
	s, _, err := c.Session().Info(a.session, nil)
	if err != nil || s == nil {
		t.Fatalf("session info: %v, %v", s, err)
	}
	if s.LockDelay != smallestLockDelay {
		t.Errorf("session LockDelay = %s, want %s", s.LockDelay, smallestLockDelay)
	}

	bCh := acquireAsync(ctx, cfg)
	testenv.WaitFor(t, 5*time.Second, "b's session", func() bool { return len(sessionsFor(t, c, cfg.Key)) == 2 })
	destroyed := time.Now()
	if _, err := c.Session().Destroy(a.session, nil); err != nil {
		t.Fatal(err)
	}
	r := receive(t, bCh, 10*time.Second, "b to acquire")
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer release(t, r.lease)
	if took := r.at.Sub(destroyed); took > time.Second {
		t.Errorf("b acquired %s after a's session was destroyed; want at once", took)
	}
}

// Acquire follows its context even while the api's blocking queries would
// not, and leaves no session behind.
func TestLockAcquireCancelled(t *testing.T) {
	t.Parallel()
	c := sharedConsul(t).Client()
	cfg := LockConfig{Client: c, Key: lockKey(t), RetryWait: 100 * time.Millisecond}
	a, err := Acquire(testCtx(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer release(t, a)

	ctx, cancel := context.WithCancel(testCtx(t))
	bCh := acquireAsync(ctx, cfg)
	testenv.WaitFor(t, 5*time.Second, "b's session", func() bool { return len(sessionsFor(t, c, cfg.Key)) == 2 })
	cancel()
	r := receive(t, bCh, time.Second, "Acquire to return after its context ended")
	if !errors.Is(r.err, context.Canceled) {
		t.Errorf("Acquire = %v, %v; want context.Canceled", r.lease, r.err)
	}
	testenv.WaitFor(t, 5*time.Second, "b's session to be destroyed", func() bool { return len(sessionsFor(t, c, cfg.Key)) == 1 })
	if !a.Valid() {
		t.Error("a lost its lease to a cancelled contender")
	}
}

// Consul refuses session TTLs under its session_ttl_min (10s by default)
// with a 500; Acquire must say so instead of retrying forever.
func TestLockTTLTooShort(t *testing.T) {
	t.Parallel()
	cfg := LockConfig{Client: sharedConsul(t).Client(), Key: lockKey(t), TTL: 2 * time.Second}
	ctx, cancel := context.WithTimeout(testCtx(t), 5*time.Second)
	defer cancel()
	_, err := Acquire(ctx, cfg)
	if err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), "Invalid Session TTL") {
		t.Fatalf("Acquire with a 2s TTL = %v (ctx %v), want Consul's refusal at once", err, ctx.Err())
	}
}

func TestLockConfig(t *testing.T) {
	c := offlineClient()
	for _, tc := range []struct {
		name string
		cfg  LockConfig
		want string
	}{
		{"no client", LockConfig{Key: "k"}, "Client"},
		{"no key", LockConfig{Client: c}, "Key"},
		{"margin too big", LockConfig{Client: c, Key: "k", TTL: 10 * time.Second, Margin: 10 * time.Second}, "Margin"},
		{"negative ttl", LockConfig{Client: c, Key: "k", TTL: -time.Second}, "negative"},
	} {
		if _, err := tc.cfg.resolve(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: resolve = %v, want an error about %s", tc.name, err, tc.want)
		}
	}
	got, err := LockConfig{Client: c, Key: "k"}.resolve()
	if err != nil {
		t.Fatal(err)
	}
	if got.TTL != DefaultTTL || got.LockDelay != DefaultLockDelay || got.Margin != DefaultTTL/5 ||
		got.RetryWait != DefaultRetryWait || got.Holder == "" || got.Now == nil || got.Log == nil {
		t.Errorf("defaults: %+v", got)
	}
	if d := got.lockDelayPoll(); d != time.Second {
		t.Errorf("lock-delay poll for a 5s delay = %s, want RetryWait (1s)", d)
	}
	nd := LockConfig{LockDelay: NoLockDelay, RetryWait: time.Second}
	if nd.sessionLockDelay() != smallestLockDelay || nd.lockDelayPoll() != minLockDelayPoll {
		t.Errorf("NoLockDelay: sent as %s, polled every %s", nd.sessionLockDelay(), nd.lockDelayPoll())
	}
}

// Valid follows the injected clock: the lease lapses at lastRenew+TTL-Margin
// whatever the timers say.
func TestLeaseValidClock(t *testing.T) {
	now := time.Unix(1000, 0)
	cfg, err := LockConfig{Client: offlineClient(), Key: "k", Now: func() time.Time { return now }}.resolve()
	if err != nil {
		t.Fatal(err)
	}
	l := &Lease{cfg: cfg, held: true, lastRenew: now}
	now = now.Add(cfg.window() - time.Nanosecond)
	if !l.Valid() {
		t.Error("not Valid just before TTL-Margin")
	}
	now = now.Add(time.Nanosecond)
	if l.Valid() {
		t.Error("Valid at TTL-Margin after the last renew")
	}
}

func lastRenew(l *Lease) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastRenew
}

// holdUntilLost runs Hold with an fn that reports each lease and, once its
// context ends, the cause; stop ends Hold.
func holdUntilLost(ctx context.Context, cfg LockConfig) (leases chan *Lease, causes, holdErr chan error, stop context.CancelFunc) {
	holdCtx, stop := context.WithCancel(ctx)
	leases, causes, holdErr = make(chan *Lease, 1), make(chan error, 1), make(chan error, 1)
	go func() {
		holdErr <- Hold(holdCtx, cfg, func(ctx context.Context, l *Lease) error {
			leases <- l
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return nil
		})
	}()
	return leases, causes, holdErr, stop
}
