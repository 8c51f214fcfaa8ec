package testenv

import (
	"context"
	"testing"
	"time"
)

// The Sentinel group replicates, and promotes the replica when the master
// is killed.
func TestSentinelFailover(t *testing.T) {
	ctx := ctxFor(t)
	g := Sentinel(t)
	if g.Master() != g.Servers[0] {
		t.Fatalf("master %s at start, want %s", g.Master().Addr(), g.Servers[0].Addr())
	}
	if err := g.Servers[0].Client().Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := g.Servers[0].Client().Wait(ctx, 1, time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	old := g.KillMaster()
	start := time.Now()
	m := g.WaitFailover(old, 20*time.Second)
	t.Logf("failover in %v", time.Since(start))
	if m != g.Servers[1] {
		t.Fatalf("new master %s, want %s", m.Addr(), g.Servers[1].Addr())
	}
	if v, err := m.Client().Get(context.Background(), "k").Result(); err != nil || v != "v" {
		t.Fatalf("k on the new master: %q, %v", v, err)
	}
}

// A TLS-only server with an ACL user answers its Client over TLS.
func TestRedisTLSAndUser(t *testing.T) {
	certs := NewCerts(t)
	r := Redis(t, WithTLS(certs), WithUser("u", "pw", "~x:* +@all"))
	ctx := ctxFor(t)
	if err := r.Client().Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if who, err := r.Client().Do(ctx, "AUTH", "u", "pw").Result(); err != nil || who != "OK" {
		t.Fatalf("AUTH u: %v %v", who, err)
	}
}
