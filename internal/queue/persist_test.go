package queue

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/cli"
	"github.com/sluicehq/sluice/internal/testenv"
)

// Every reply by which Redis says it cannot serve or cannot write now is
// Transient, however the command; a reply about the command is not. The
// replies come from a real Redis (a script's error_reply), so they are
// redis.Errors as the pool sees them.
func TestUnavailableRepliesAreTransient(t *testing.T) {
	r := testenv.Redis(t)
	ctx := context.Background()
	reply := func(msg string) error {
		return r.Client().Eval(ctx, "return redis.error_reply(ARGV[1])", nil, msg).Err()
	}
	for msg, want := range map[string]bool{
		"MISCONF Errors writing to the AOF file: No space left on device":                                  true,
		"MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk.": true,
		"READONLY You can't write against a read only replica.":                                            true,
		"LOADING Redis is loading the dataset in memory":                                                   true,
		"OOM command not allowed when used memory > 'maxmemory'.":                                          true,
		"MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.":                 true,
		"NOREPLICAS Not enough good replicas to write.":                                                    true,
		"BUSY Redis is busy running a script.":                                                             true,
		"TRYAGAIN Multiple keys request during rehashing of slot":                                          true,
		"CLUSTERDOWN The cluster is down":                                                                  true,
		"ERR max number of clients reached":                                                                true,
		"ERR Error running script (call to f_1): @user_script:1: -MISCONF Errors writing to the AOF file":  true,
		"BUSYKEY Target key name already exists.":                                                          false,
		"BUSYGROUP Consumer Group name already exists":                                                     false,
		"WRONGTYPE Operation against a key holding the wrong kind of value":                                false,
		"ERR syntax error": false,
		"NOPERM this user has no permissions to run the 'set' command": false,
	} {
		err := reply(msg)
		if err == nil || !strings.HasPrefix(err.Error(), msg[:4]) {
			t.Fatalf("error_reply(%q) answered %v", msg, err)
		}
		if Transient(err) != want {
			t.Errorf("Transient(%q) = %v, want %v", err, !want, want)
		}
	}
}

// A Redis that cannot persist (a failed BGSAVE with
// stop-writes-on-bgsave-error: a full disk) answers MISCONF to every
// write: the enqueue fails as a whole, Transient, never as a job's own
// failure (which the relay would requeue and then dead-letter); acks,
// failures and idempotency records fail Transient too, so the worker holds
// and retries them. Once Redis persists again the same calls go through.
func TestMISCONFIsTransientForEveryWrite(t *testing.T) {
	r := testenv.Redis(t)
	p := newPool(t, 1, r.Addr(), nil)
	ctx := context.Background()
	enqueueOK(t, p, 1, positioned(0, 0, item("a", "g")), now)
	claimed, err := p.Claim(ctx, jq(0), 1, time.Hour)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim: %v %v", claimed, err)
	}
	if begun, err := p.IdempotencyBegin(ctx, "k", "a", 1, time.Hour); err != nil || !begun.Run {
		t.Fatalf("begin: %+v %v", begun, err)
	}

	persistAgain := r.RefusePersisting(t)
	res, err := p.Enqueue(ctx, 1, positioned(0, 1, item("b", "g")), now)
	if err == nil || !Transient(err) || !strings.Contains(err.Error(), "MISCONF") {
		t.Fatalf("enqueue while Redis cannot persist: results %+v, err %v; want a Transient MISCONF error for the batch", res, err)
	}
	if _, err := p.IdempotencyEnd(ctx, "k", "a", 1, true, time.Hour); !Transient(err) {
		t.Fatalf("idempotency record: %v, want Transient", err)
	}
	if _, err := p.AckMany(ctx, jq(0), []Done{{Job: claimed[0]}}, now, time.Hour); !Transient(err) {
		t.Fatalf("ack: %v, want Transient", err)
	}
	if _, err := p.Fail(ctx, jq(0), Failure{Job: claimed[0], Cause: "x", NextTry: now}, now, DeadLimits{}); !Transient(err) {
		t.Fatalf("failure: %v, want Transient", err)
	}

	persistAgain()
	if res := enqueueOK(t, p, 1, positioned(0, 1, item("b", "g")), now); res[0].Outcome != Queued {
		t.Fatalf("enqueue once Redis persists: %+v", res)
	}
	if _, err := p.IdempotencyEnd(ctx, "k", "a", 1, true, time.Hour); err != nil {
		t.Fatal(err)
	}
	if ok, err := p.AckMany(ctx, jq(0), []Done{{Job: claimed[0]}}, now, time.Hour); err != nil || !ok[0] {
		t.Fatalf("ack once Redis persists: %v %v", ok, err)
	}
}

// A success recorded after the running mark expired (Redis refused the
// record for longer than the mark's hold) still marks the key done, so the
// job's next holder skips it; a failure leaves the key free, and another
// attempt's mark is left alone.
func TestIdempotencyEndRecordsDoneOnAnExpiredMark(t *testing.T) {
	r := testenv.Redis(t)
	p := newPool(t, 1, r.Addr(), nil)
	ctx := context.Background()
	key, _ := p.idemKey("k")
	if _, err := p.IdempotencyBegin(ctx, "k", "a", 1, 20*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 5*time.Second, "the running mark to expire", func() bool {
		n, _ := r.Client().Exists(ctx, key).Result()
		return n == 0
	})
	if _, err := p.IdempotencyEnd(ctx, "k", "a", 1, false, time.Hour); err != nil {
		t.Fatal(err)
	}
	if n, _ := r.Client().Exists(ctx, key).Result(); n != 0 {
		t.Fatal("a failure recorded a mark")
	}
	if _, err := p.IdempotencyEnd(ctx, "k", "a", 1, true, time.Hour); err != nil {
		t.Fatal(err)
	}
	if begun, err := p.IdempotencyBegin(ctx, "k", "a", 2, time.Hour); err != nil || begun.DoneBy != "a" {
		t.Fatalf("the next attempt found %+v (%v), want done by a", begun, err)
	}
	// Another job's running mark is not ours to end.
	r.Client().Set(ctx, key, runningMark("b", 1), time.Hour)
	if _, err := p.IdempotencyEnd(ctx, "k", "a", 1, true, time.Hour); err != nil {
		t.Fatal(err)
	}
	if v, _ := r.Client().Get(ctx, key).Result(); v != runningMark("b", 1) {
		t.Fatalf("another job's mark became %q", v)
	}
}

// Only noeviction passes: an evicting policy, volatile-* included, is an
// EvictingError that names the server, the policy and the fix, and
// Misconfigured (a part does not wait for it to change). A user without
// CONFIG reads it from INFO; one without either is warned about and let
// through.
func TestCheckEvictionRefusesAnEvictingPolicy(t *testing.T) {
	r := testenv.Redis(t,
		testenv.WithUser("noconfig", "pw1", "~sluice:* &* +@all -config"),
		testenv.WithUser("blind", "pw2", "~sluice:* &* +@all -config -info"))
	ctx := context.Background()
	var logged bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logged, nil))
	pool := func(user, pw string) *Pool {
		p, err := NewPool(PoolConfig{Keyspace: Keyspace{Stage: "test", Partitions: 2}, Addr: r.Addr(),
			Connect: Connect{User: user, Password: cli.Secret{Value: pw}}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		return p
	}
	admin, noConfig, blind := pool("", ""), pool("noconfig", "pw1"), pool("blind", "pw2")
	if err := admin.CheckEviction(ctx, log); err != nil {
		t.Fatalf("noeviction (the test Redis's): %v", err)
	}
	for _, policy := range []string{"allkeys-lru", "volatile-ttl", "allkeys-random"} {
		if err := r.Client().ConfigSet(ctx, "maxmemory-policy", policy).Err(); err != nil {
			t.Fatal(err)
		}
		for name, p := range map[string]*Pool{"CONFIG GET": admin, "INFO memory": noConfig} {
			err := p.CheckEviction(ctx, log)
			var ev *EvictingError
			if !errors.As(err, &ev) || ev.Policy != policy || !Misconfigured(err) {
				t.Fatalf("%s, policy %s: %v, want an EvictingError", name, policy, err)
			}
			want := "redis " + r.Addr() + ": maxmemory-policy is " + policy + ": Sluice keeps jobs, idempotency marks and leases in Redis and an evicting policy would silently drop them; set maxmemory-policy noeviction"
			if !strings.HasPrefix(err.Error(), want) {
				t.Fatalf("error %q, want it to start %q", err, want)
			}
		}
		if err := blind.CheckEviction(ctx, log); err != nil {
			t.Fatalf("a user who can read neither: %v, want a warning only", err)
		}
	}
	if !strings.Contains(logged.String(), "could not read Redis's maxmemory-policy") || !strings.Contains(logged.String(), r.Addr()) {
		t.Fatalf("no warning for the blind user: %s", logged.String())
	}
	// Redis down: the error is Redis's, not an EvictingError, and not
	// Misconfigured, so a part waits for it.
	r.Stop()
	if err := admin.CheckEviction(ctx, log); err == nil || Misconfigured(err) {
		t.Fatalf("Redis down: %v", err)
	}
}

// On a Redis Cluster every master is checked: one evicting master is
// enough to refuse, and the error names it.
func TestCheckEvictionOnEveryClusterMaster(t *testing.T) {
	c := testenv.NewRedisCluster(t, 3)
	p := clusterPool(t, c, 4)
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	if err := p.CheckEviction(ctx, log); err != nil {
		t.Fatalf("every master noeviction: %v", err)
	}
	last := c.Addrs()[len(c.Addrs())-1]
	if err := c.Node(last).ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err(); err != nil {
		t.Fatal(err)
	}
	err := p.CheckEviction(ctx, log)
	var ev *EvictingError
	if !errors.As(err, &ev) || !strings.Contains(err.Error(), "cluster master "+last) {
		t.Fatalf("one master allkeys-lru (%s): %v", last, err)
	}
}

// IdempotencyBegin answers which of its three cases holds: the attempt
// may run (the mark is set, or is its own already), another attempt's run
// holds the key (its mark, for IdempotencyWait), or a job completed it.
func TestIdempotencyBeginAnswersWhoHoldsTheKey(t *testing.T) {
	r := testenv.Redis(t)
	p := newPool(t, 1, r.Addr(), nil)
	ctx := context.Background()
	for _, c := range []struct {
		id      string
		attempt int
		want    IdempotencyBegun
	}{
		{"a", 1, IdempotencyBegun{Run: true}},
		{"a", 1, IdempotencyBegun{Run: true}}, // its own mark: again
		{"a", 2, IdempotencyBegun{Running: runningMark("a", 1)}},
		{"b", 1, IdempotencyBegun{Running: runningMark("a", 1)}},
	} {
		if got, err := p.IdempotencyBegin(ctx, "k", c.id, c.attempt, time.Hour); err != nil || got != c.want {
			t.Fatalf("begin by %s attempt %d: %+v %v, want %+v", c.id, c.attempt, got, err, c.want)
		}
	}
	if _, err := p.IdempotencyEnd(ctx, "k", "a", 1, true, time.Hour); err != nil {
		t.Fatal(err)
	}
	if got, err := p.IdempotencyBegin(ctx, "k", "b", 1, time.Hour); err != nil || got != (IdempotencyBegun{DoneBy: "a"}) {
		t.Fatalf("begin after a's success: %+v %v, want done by a", got, err)
	}
}
