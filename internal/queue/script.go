package queue

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// script is one Lua script the pool runs: go-redis's Script (EVALSHA,
// EVAL when Redis answers NOSCRIPT) under a name for errors and tests.
// Every script is made by newScript and so loaded by LoadScripts.
//
// A script is sent as it is: the clients have MaxRetries -1 (connect.go,
// cluster.go), because a retried call may run a non-idempotent script
// twice; the runner adds no retries of its own.
type script struct {
	name string
	src  string
	rs   *redis.Script
}

// scripts are every script the pool runs, for LoadScripts.
var scripts []*script

// newScript makes a script of Lua fragments (luaNow, luaFunnel, luaLanes,
// ...) and its own body, last, and registers it for LoadScripts.
func newScript(name string, fragments ...string) *script {
	s := buildScript(name, fragments...)
	scripts = append(scripts, s)
	return s
}

// buildScript makes a script without registering it: a variant a test
// runs (see claimVariant).
func buildScript(name string, fragments ...string) *script {
	if name == "" || len(fragments) == 0 {
		panic("queue: a script needs a name and a body")
	}
	src := lua(fragments...)
	return &script{name: name, src: src, rs: redis.NewScript(src)}
}

// lua joins fragments into one script, each on lines of its own: a
// fragment defines locals and functions the later ones use, so their
// order is the order given.
func lua(fragments ...string) string {
	var b strings.Builder
	for _, f := range fragments {
		b.WriteString(f)
		if !strings.HasSuffix(f, "\n") {
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// run runs the script on c (one Redis, or a cluster: KEYS place the call)
// by go-redis's Script.Run: EVALSHA, and EVAL when Redis lost the script
// (a restart, a failover, a resharding). A nil reply is nil, not an error.
func (s *script) run(ctx context.Context, c redis.Scripter, keys []string, args ...any) (any, error) {
	res, err := s.rs.Run(ctx, c, keys, args...).Result()
	if err == redis.Nil {
		return nil, nil
	}
	return res, err
}

// queueIn queues the script in a pipeline by EVALSHA alone: a pipeline
// cannot fall back to EVAL by itself, so the script must be loaded
// (LoadScripts at start), and the caller reloads it (load) and queues the
// calls again when a command answers NOSCRIPT (isNoScript).
func (s *script) queueIn(ctx context.Context, pipe redis.Pipeliner, keys []string, args ...any) *redis.Cmd {
	return s.rs.EvalSha(ctx, pipe, keys, args...)
}

// load loads the script into c's script cache (on a cluster, every node's).
func (s *script) load(ctx context.Context, c redis.Scripter) error {
	if err := s.rs.Load(ctx, c).Err(); err != nil {
		return fmt.Errorf("loading script %s: %w", s.name, err)
	}
	return nil
}

// isNoScript reports whether err is Redis's answer for a script it does
// not have cached.
func isNoScript(err error) bool {
	return err != nil && (err == redis.ErrNoScript || strings.HasPrefix(err.Error(), "NOSCRIPT"))
}
