package testenv

import (
	"context"
	"strconv"
	"strings"
	"testing"
)

// CommandMicros is the total time Redis spent in command (say "evalsha")
// since its stats were last reset, from INFO commandstats: for benchmarks
// whose limit is Redis's one core.
func (s *RedisServer) CommandMicros(t testing.TB, command string) float64 {
	t.Helper()
	info, err := s.Client().Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatalf("testenv: INFO commandstats: %v", err)
	}
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+command+":")
		if !ok {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(kv, "usec="); ok {
				us, _ := strconv.ParseFloat(v, 64)
				return us
			}
		}
	}
	return 0
}
