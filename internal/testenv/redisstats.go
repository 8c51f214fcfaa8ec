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

// CPUSeconds is the CPU time redis-server has used since it started (user
// plus system, from INFO cpu): a benchmark that shares 2 cores with Redis
// divides the difference by its work to see what each unit costs Redis.
func (s *RedisServer) CPUSeconds(t testing.TB) float64 {
	t.Helper()
	info, err := s.Client().Info(context.Background(), "cpu").Result()
	if err != nil {
		t.Fatalf("testenv: INFO cpu: %v", err)
	}
	total := 0.0
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_user" || k == "used_cpu_sys") {
			f, _ := strconv.ParseFloat(v, 64)
			total += f
		}
	}
	return total
}
