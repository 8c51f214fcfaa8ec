package periodic

import (
	"context"
	"fmt"
	"strings"

	"github.com/hashicorp/consul/api"

	"github.com/sluicehq/sluice/internal/consul"
)

// The Consul KV folders of a stage's periodic jobs.
const (
	// SchedulesFolder holds a Schedule per key: sluice/<stage>/periodic/<name>.
	SchedulesFolder = "periodic"
	// StatesFolder holds the scheduler's State per schedule, apart from
	// the schedules so that its writes wake no schedule watch:
	// sluice/<stage>/periodic-state/<name>.
	StatesFolder = "periodic-state"
)

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

// StateKey is a schedule's state key.
func StateKey(stage, name string) (string, error) {
	if err := CheckName(name); err != nil {
		return "", err
	}
	return consul.Key(stage, StatesFolder, name)
}

// ConsulStore keeps States in Consul KV under sluice/<stage>/periodic-state/.
type ConsulStore struct {
	KV    *api.KV
	Stage string
}

// Load reads every State. A value that does not decode is left out (the
// schedule then counts from now, as a new one does).
func (c ConsulStore) Load(ctx context.Context) (map[string]State, error) {
	prefix, err := consul.Key(c.Stage, StatesFolder)
	if err != nil {
		return nil, err
	}
	pairs, _, err := c.KV.List(prefix+"/", (&api.QueryOptions{RequireConsistent: true}).WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("periodic: reading %s/: %w", prefix, err)
	}
	states := make(map[string]State, len(pairs))
	for _, p := range pairs {
		name := strings.TrimPrefix(p.Key, prefix+"/")
		if st, err := DecodeState(p.Value); err == nil && name != "" {
			states[name] = st
		}
	}
	return states, nil
}

// Save writes one State.
func (c ConsulStore) Save(ctx context.Context, name string, s State) error {
	key, err := StateKey(c.Stage, name)
	if err != nil {
		return err
	}
	if _, err := c.KV.Put(&api.KVPair{Key: key, Value: s.Encode()}, (&api.WriteOptions{}).WithContext(ctx)); err != nil {
		return fmt.Errorf("periodic: writing %s: %w", key, err)
	}
	return nil
}
