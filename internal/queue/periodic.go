package queue

import (
	"context"
	"fmt"
)

// PeriodicStates is the hash of the periodic scheduler's state, one field
// per schedule name holding its internal/periodic.State as JSON. It lives
// on partition 0 beside the topic registry, in Redis rather than in
// Consul with the schedules: a state changes at every slot, and Redis
// (with its AOF) keeps it through a Consul that loses its data.
func (k PartKeys) PeriodicStates() string { return k.prefix + "periodic" }

// PeriodicStates reads every schedule's state.
func (p *Pool) PeriodicStates(ctx context.Context) (map[string]string, error) {
	states, err := p.byPart[0].HGetAll(ctx, p.keyspace.PartKeys(0).PeriodicStates()).Result()
	if err != nil {
		return nil, fmt.Errorf("reading the periodic schedules' states: %w", err)
	}
	return states, nil
}

// SavePeriodicState writes one schedule's state.
func (p *Pool) SavePeriodicState(ctx context.Context, name string, state []byte) error {
	if err := p.byPart[0].HSet(ctx, p.keyspace.PartKeys(0).PeriodicStates(), name, state).Err(); err != nil {
		return fmt.Errorf("writing periodic schedule %s's state: %w", name, err)
	}
	return nil
}

// DeletePeriodicState forgets a deleted schedule's state.
func (p *Pool) DeletePeriodicState(ctx context.Context, name string) error {
	if err := p.byPart[0].HDel(ctx, p.keyspace.PartKeys(0).PeriodicStates(), name).Err(); err != nil {
		return fmt.Errorf("deleting periodic schedule %s's state: %w", name, err)
	}
	return nil
}
