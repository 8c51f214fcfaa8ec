package queue

import (
	"context"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testenv"
)

// TestOpenAsHoldsThePoolAsThePartsInterface: OpenAs answers the pool as the
// interface asked for; on an error a nil interface (a nil *Pool inside one
// would pass a nil check and panic at its first call); and a clear error
// when *Pool lacks a method of the interface.
func TestOpenAsHoldsThePoolAsThePartsInterface(t *testing.T) {
	type pinger interface{ Ping(context.Context) error }
	r := testenv.Redis(t)
	cfg := PoolConfig{Keyspace: Keyspace{Stage: "t", Partitions: 2}, Addr: r.Addr()}

	p, err := OpenAs[pinger](cfg)
	if err != nil || p == nil {
		t.Fatalf("OpenAs = %v, %v; want a pool", p, err)
	}
	if err := p.Ping(context.Background()); err != nil {
		t.Fatalf("Ping through the interface: %v", err)
	}
	p.(*Pool).Close()

	bad := cfg
	bad.Keyspace.Partitions = 0
	if p, err := OpenAs[pinger](bad); err == nil || p != nil {
		t.Fatalf("OpenAs of a bad config = %#v, %v; want a nil interface and an error", p, err)
	}

	type lacking interface{ NoSuchMethod() }
	if l, err := OpenAs[lacking](cfg); err == nil || l != nil || !strings.Contains(err.Error(), "does not implement") {
		t.Fatalf("OpenAs of an interface *Pool lacks = %v, %v; want a nil interface and an error naming it", l, err)
	}
}
