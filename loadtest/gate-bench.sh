#!/usr/bin/env bash
# Gate benchmark, everything on this host, all measured in one run so the
# numbers compare as ratios on a noisy machine:
#   1. a bare Go handler (reads the body, answers 202) under wrk: the ceiling;
#   2. the gate of `sluice dev` (kfake in process, persisted) under wrk with
#      single-job POSTs, then with 100-job NDJSON batches;
#   3. the gate at half its measured single-job rate, open loop, for p50/p99,
#      and the same open loop against the bare handler: the generator's floor.
# Usage: loadtest/gate-bench.sh   (make bench-gate builds and runs it)
# Env: BIN (default bin/sluice), DURATION (default 20s), CONNS (default 64),
# ACKS (leader or all; default empty: the gate's default, all).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin/sluice}
DURATION=${DURATION:-20s}
CONNS=${CONNS:-64}
command -v wrk >/dev/null || { echo "wrk not found: apt-get install wrk (make bench-gate does this)" >&2; exit 1; }

work=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null || shuf -i 20000-60000 -n 1; }
wait_http() { for _ in $(seq 200); do curl -fsS -o /dev/null "$1" 2>/dev/null && return 0; sleep 0.1; done; echo "no answer from $1" >&2; return 1; }
lua() { # lua <file> <body-file> <content-type>
	printf 'wrk.method = "POST"\nwrk.headers["Content-Type"] = "%s"\nwrk.body = [[\n%s]]\n' "$3" "$(cat "$2")" > "$1"
}
rps() { awk '/Requests\/sec/ {printf "%.0f", $2}'; }
p99() { awk '/ 99%/ {print $2}'; }

"$BIN" loadtest body > "$work/single.json"
"$BIN" loadtest body --batch 100 > "$work/batch.ndjson"
lua "$work/single.lua" "$work/single.json" application/json
lua "$work/batch.lua" "$work/batch.ndjson" application/x-ndjson

bare=$(free_port)
"$BIN" loadtest bare-server --listen "127.0.0.1:$bare" & pids+=($!)
gate=$(free_port)
"$BIN" dev --dir "$work/sluice" --log-level warn --gate-addr "127.0.0.1:$gate" \
	--kafka-addr "127.0.0.1:$(free_port)" --redis-addr "127.0.0.1:$(free_port)" \
	--consul-addr "127.0.0.1:$(free_port)" > "$work/dev.out" 2> "$work/dev.err" & pids+=($!)
wait_http "http://127.0.0.1:$bare/"
wait_http "http://127.0.0.1:$gate/readyz"
url="http://127.0.0.1:$gate/v1/topics/jobs/jobs"
acks="${ACKS:+?acks=$ACKS}"
curl -fsS -o /dev/null -X POST "$url$acks" -d @"$work/single.json" # warm up metadata and connections

# Batches last: kfake keeps every record in the gate process's heap, so the
# millions they write would slow the collector for every later step.
bare_out=$(wrk -t2 -c"$CONNS" -d"$DURATION" --latency -s "$work/single.lua" "http://127.0.0.1:$bare/")
bare_rps=$(rps <<<"$bare_out")
single_out=$(wrk -t2 -c"$CONNS" -d"$DURATION" --latency -s "$work/single.lua" "$url$acks")
single_rps=$(rps <<<"$single_out")
half=$(( single_rps / 2 ))
open_out=$("$BIN" loadtest gate --url "$url$acks" --rate "$half" --duration "$DURATION" --conns "$CONNS")
# The generator's own floor: the same open loop against the bare handler.
floor_out=$("$BIN" loadtest gate --url "http://127.0.0.1:$bare/x/jobs" --rate "$half" --duration "$DURATION" --conns "$CONNS")
batch_out=$(wrk -t2 -c16 -d"$DURATION" --latency -s "$work/batch.lua" "$url:batch$acks")
batch_jobs=$(( $(rps <<<"$batch_out") * 100 ))

ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a/b}'; }
cat <<REPORT
gate benchmark on $(nproc) cores, $(date -u +%Y-%m-%dT%H:%MZ), duration $DURATION per step, acks ${ACKS:-all (the default)}
| measurement                                   | result          | vs bare handler |
|-----------------------------------------------|-----------------|-----------------|
| bare Go handler, wrk -t2 -c$CONNS                  | $bare_rps req/s | 1.00 |
| gate single-job POSTs, wrk -t2 -c$CONNS            | $single_rps req/s (p99 $(p99 <<<"$single_out")) | $(ratio "$single_rps" "$bare_rps") |
| gate 100-job NDJSON batches, wrk -t2 -c16     | $batch_jobs jobs/s | $(ratio "$batch_jobs" "$bare_rps") |
REPORT
echo
echo "open loop at half the gate's single rate ($half req/s), latency from due time:"
echo "  gate:         $open_out"
echo "  bare handler: $floor_out"
