package periodic

import (
	"context"

	"github.com/sluicehq/sluice/internal/consul"
)

// SchedulesFolder is the Consul KV folder of a stage's schedules, a
// Schedule per key: sluice/<stage>/periodic/<name>. Their States are in
// Redis (PoolStore).
const SchedulesFolder = "periodic"

// SchedulesPrefix is the prefix watched for schedules, with its '/'.
func SchedulesPrefix(stage string) (string, error) {
	k, err := consul.Key(stage, SchedulesFolder)
	return k + "/", err
}

// ScheduleKey is a schedule's key.
func ScheduleKey(stage, name string) (string, error) {
	if err := CheckName(name); err != nil {
		return "", err
	}
	return consul.Key(stage, SchedulesFolder, name)
}

// PoolStore keeps States in Redis (queue.Pool.PeriodicStates).
type PoolStore struct{ Pool Redis }

// Redis is what PoolStore does in Redis (a *queue.Pool has it): the
// holder of a store lists these in its own Redis surface.
type Redis interface {
	PeriodicStates(ctx context.Context) (map[string]string, error)
	SavePeriodicState(ctx context.Context, name string, state []byte) error
}

// Load reads every State. A value that does not decode is left out (the
// schedule then counts from now, as a new one does).
func (s PoolStore) Load(ctx context.Context) (map[string]State, error) {
	raw, err := s.Pool.PeriodicStates(ctx)
	if err != nil {
		return nil, err
	}
	states := make(map[string]State, len(raw))
	for name, v := range raw {
		if st, err := DecodeState([]byte(v)); err == nil {
			states[name] = st
		}
	}
	return states, nil
}

// Save writes one State.
func (s PoolStore) Save(ctx context.Context, name string, st State) error {
	return s.Pool.SavePeriodicState(ctx, name, st.Encode())
}
