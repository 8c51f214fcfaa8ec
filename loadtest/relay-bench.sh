#!/usr/bin/env bash
# Relay benchmark, measured in one run with its yardstick:
#   1. redis-benchmark: a 3-command EVALSHA pipelined 16 deep against a fresh
#      redis-server (the issue's yardstick, ~290k/s on a quiet machine);
#   2. go test -bench RelayUnthrottled: 200,000 jobs from kfake (8 partitions)
#      into Redis (8 partitions) by one relay, unthrottled.
# Usage: loadtest/relay-bench.sh   (make bench-relay)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-200000}
command -v redis-benchmark >/dev/null || { echo "redis-benchmark not found: apt-get install redis-tools" >&2; exit 1; }
work=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" --daemonize no > "$work/redis.log" 2>&1 &
rpid=$!
trap 'kill $rpid 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.05; done
sha=$(redis-cli -p "$port" SCRIPT LOAD "redis.call('INCR', KEYS[1]); redis.call('HSET', KEYS[2], 'f', ARGV[1]); return redis.call('RPUSH', KEYS[3], ARGV[1])")
yard=$(redis-benchmark -p "$port" -P 16 -n 1000000 -q EVALSHA "$sha" 3 '{t}a' '{t}b' '{t}c' v | tr '\r' '\n' | awk '/requests per second/ {for (i=1;i<=NF;i++) if ($i ~ /^[0-9.]+$/) v=$i} END {print v}')
kill $rpid; wait $rpid 2>/dev/null || true
relay=$(go test ./relay -run '^$' -bench RelayUnthrottled -benchtime "${N}x" 2>&1 | grep '^BenchmarkRelayUnthrottled')
jobs=$(awk '{for (i=1;i<=NF;i++) if ($(i+1)=="jobs/s") print $i}' <<<"$relay")
us=$(awk '{for (i=1;i<=NF;i++) if ($(i+1)=="redis-µs/job") print $i}' <<<"$relay")
cat <<REPORT
relay benchmark on $(nproc) cores, $(date -u +%Y-%m-%dT%H:%MZ)
| measurement | result | vs yardstick |
|---|---|---|
| redis-benchmark, 3-command EVALSHA, -P 16 | $yard calls/s | 1.00 |
| relay, kfake -> Redis, $N jobs, unthrottled | $jobs jobs/s (Redis $us µs/job) | $(awk -v a="$jobs" -v b="$yard" 'BEGIN {printf "%.2f", a/b}') |
REPORT
