package queue

import (
	"context"
	"testing"

	"github.com/sluicehq/sluice/internal/testenv"
)

// Every script the pool runs, and every variant a test builds, compiles
// on a real Redis (SCRIPT LOAD), under a name of its own, and Redis knows
// it by the digest go-redis sends with EVALSHA.
func TestEveryScriptLoads(t *testing.T) {
	ctx := context.Background()
	c := testenv.Redis(t).Client()
	all := append([]*script{}, scripts...)
	for _, r := range []claimRounds{roundsOff, roundsProbe} {
		all = append(all, buildScript("claim/rounds="+string(r), claimSource(r)...))
	}
	if len(scripts) < 25 {
		t.Fatalf("only %d scripts registered", len(scripts))
	}
	names := map[string]bool{}
	for _, s := range all {
		if names[s.name] {
			t.Errorf("two scripts named %q", s.name)
		}
		names[s.name] = true
		sha, err := c.ScriptLoad(ctx, s.src).Result()
		if err != nil {
			t.Errorf("script %s: %v", s.name, err)
			continue
		}
		if sha != s.rs.Hash() {
			t.Errorf("script %s: Redis's digest %s, go-redis's %s", s.name, sha, s.rs.Hash())
		}
	}
}
