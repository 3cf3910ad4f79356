#!/usr/bin/env bash
# transport-bench.sh: cellctl bench transport over every one-sided
# provider of one server, and YCSB-C and E with each (issue #41's
# benchmarks, BENCHMARKS.md "One-sided reads over libfabric").
#
# One cellserver (--cores 1, RF 1, 1 GiB region) with --provider fabric
# --fabric-provider shm,tcp, so that its region is registered with the tcp
# responder, shm, and libfabric's shm and tcp;ofi_rxm at once; cellctl on
# the same host, built with -tags libfabric. Then:
#   1. bench transport: 1 KiB reads, 128-byte RPCs and both, at 1 and 16
#      in flight, providers tcp, shm, fabric/shm, fabric/tcp in an order
#      rotating each round, $REPEAT rounds, with the server's CPU per op;
#   2. bench --workload ycsb-c and ycsb-e, $CLIENTS clients, client-side
#      searches (--mode client) and adaptive, over each provider in turn
#      ($REPEAT rounds, the providers rotating).
# Prints every run (markdown tables) and leaves the JSON in $OUT.
#
# Usage: test/transport-bench.sh
# Environment: DURATION (3s), WARMUP (1s), REPEAT (3), KEYS (100000),
# CLIENTS (4), IN_FLIGHT (1,16), MODES (client adaptive), BIN (cellserver
# and cellctl built with -tags libfabric; default: build them), BASE_PORT
# (27270), OUT (a temp dir). Binds fixed ports: run it under
# flock /work/notes/fixed-ports.lock on a shared machine.
set -euo pipefail

DURATION=${DURATION:-3s}
WARMUP=${WARMUP:-1s}
REPEAT=${REPEAT:-3}
KEYS=${KEYS:-100000}
CLIENTS=${CLIENTS:-4}
IN_FLIGHT=${IN_FLIGHT:-1,16}
MODES=${MODES:-client adaptive}
BASE_PORT=${BASE_PORT:-27270}
BUILD_TAGS=libfabric
SERVER_FLAGS="--provider fabric --fabric-provider shm,tcp"
export BUILD_TAGS SERVER_FLAGS

root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=one-server.bash
source "$root/test/one-server.bash"
one_server_start transport
one_server_store
commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
echo "# cellserver pid $server_pid, commit $commit, load $(cut -d' ' -f1 /proc/loadavg)" >&2
ctl members >&2

echo "## bench transport ($REPEAT rounds, $DURATION per cell after $WARMUP; commit $commit; load $(cut -d' ' -f1 /proc/loadavg) at the start)"
echo
ctl bench transport --providers tcp,shm,fabric/shm,fabric/tcp --fabric-addr 127.0.0.1 --in-flight "$IN_FLIGHT" \
	--duration "$DURATION" --warmup "$WARMUP" --repeat "$REPEAT" --server-pid "$server_pid" -w json >"$OUT/transport.json"
jq -r '"server idle: \(.server_idle_cpu_per_sec_ns / 1000 | floor) µs of CPU per second", "",
	"| round | workload | provider | in flight | ops/s | p50 µs | p99 µs | server CPU µs/op | above idle µs/op | client CPU µs/op | errors |",
	"|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
	(.rows[] | "| \(.round) | \(.workload) | \(.provider // "-") | \(.in_flight) | \(.ops_per_sec | floor) | \(.p50_ns / 1000 * 100 | floor / 100) | \(.p99_ns / 1000 * 100 | floor / 100) | \(if .server_cpu_per_op_ns < 0 then "-" else (.server_cpu_per_op_ns / 1000 * 100 | floor / 100) end) | \(.server_busy_cpu_per_op_ns / 1000 * 100 | floor / 100) | \(.client_cpu_per_op_ns / 1000 * 100 | floor / 100) | \(.errors) |")' "$OUT/transport.json"
echo
echo "load $(cut -d' ' -f1 /proc/loadavg) at the end"

echo
echo "## YCSB-C and YCSB-E ($KEYS keys, $CLIENTS clients x 1 in flight, $DURATION after $WARMUP, $REPEAT rounds)"
echo
providers=(tcp shm fabric/shm fabric/tcp)
for rep in $(seq "$REPEAT"); do
	for w in c e; do
		for mode in $MODES; do
			for i in 0 1 2 3; do
				p=${providers[$(((i + rep) % 4))]}
				args=(--provider "${p%%/*}")
				if [[ $p == fabric/* ]]; then
					args+=(--fabric-provider "${p#fabric/}")
					[[ $p == fabric/tcp ]] && args+=(--fabric-addr 127.0.0.1)
				fi
				echo "# round $rep: ycsb-$w $mode $p (load $(cut -d' ' -f1 /proc/loadavg))" >&2
				ctl bench --workload "ycsb-$w" --mode "$mode" "${args[@]}" --keys 0 --keyspace "$KEYS" \
					--clients "$CLIENTS" --in-flight 1 --duration "$DURATION" --warmup "$WARMUP" \
					--server-pid "$server_pid" --no-progress -w json >"$OUT/ycsb-$rep-$w-$mode-${p/\//-}.json"
			done
		done
	done
done
echo "| round | workload | mode | provider | ops/s | p50 µs | p99 µs | server CPU µs/op | client-side hops | errors |"
echo "|---:|---|---|---|---:|---:|---:|---:|---:|---:|"
for f in "$OUT"/ycsb-*.json; do
	b=$(basename "$f" .json)
	IFS=- read -r _ rep w mode p1 p2 <<<"$b"
	p=$p1${p2:+/$p2}
	jq -r --arg rep "$rep" --arg w "$w" --arg mode "$mode" --arg p "$p" \
		'"| \($rep) | ycsb-\($w) | \($mode) | \($p) | \(.throughput | floor) | \(.p50_ns / 1000 * 100 | floor / 100) | \(.p99_ns / 1000 * 100 | floor / 100) | \(.server_cpu_us_per_op * 100 | floor / 100) | \(if (.server_hops + .client_hops) == 0 then "-" else "\(.client_hops / (.server_hops + .client_hops) * 1000 | floor / 10)%" end) | \(.errors) |"' "$f"
done | sort -t'|' -k3,3 -k4,4 -k5,5 -k2,2n
echo
echo "JSON of every run: $OUT"
