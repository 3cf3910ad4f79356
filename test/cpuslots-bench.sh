#!/usr/bin/env bash
# cpuslots-bench.sh: client.Config.CPUSlots against no bound, over shm,
# with tcp beside them (BENCHMARKS.md §11: the replies of server-side
# operations wait for Go's network poller while client-side work over shm
# keeps every P of the client busy).
#
# One cellserver (--cores 1, RF 1, its log synced) and cellctl bench on
# the same host, neither pinned (cellctl then has GOMAXPROCS 2); $KEYS
# keys stored once, then for each repeat and workload, adaptive mode,
# $CLIENTS clients: shm with no bound, shm with --cpu-slots 1, tcp, in an
# order that rotates with the repeat. Prints every run: ops/s, and p50 /
# p99 of each operation kind, and the client's CPU per operation.
#
# Usage: test/cpuslots-bench.sh
# Environment: DURATION (6s), WARMUP (1s), KEYS (100000), CLIENTS (16),
# REPEAT (2), WORKLOADS (b e c), SLOTS (1), BIN (a directory with
# cellserver and cellctl; default: build them), BASE_PORT (27270), OUT (a
# temp dir: the JSON of every run).
set -euo pipefail

DURATION=${DURATION:-6s}
WARMUP=${WARMUP:-1s}
KEYS=${KEYS:-100000}
CLIENTS=${CLIENTS:-16}
REPEAT=${REPEAT:-2}
WORKLOADS=${WORKLOADS:-b e c}
SLOTS=${SLOTS:-1}
BASE_PORT=${BASE_PORT:-27270}

root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=one-server.bash
source "$root/test/one-server.bash"
one_server_start cpuslots
one_server_store

runs=("shm 0" "shm $SLOTS" "tcp 0")
start=$(date -u +%FT%TZ)
load0=$(cut -d' ' -f1 /proc/loadavg)
for rep in $(seq "$REPEAT"); do
	for w in $WORKLOADS; do
		for i in 0 1 2; do
			read -r p s <<<"${runs[$(((i + rep) % 3))]}"
			echo "# repeat $rep: ycsb-$w $p cpu-slots $s (load $(cut -d' ' -f1 /proc/loadavg))" >&2
			ctl bench --workload "ycsb-$w" --mode adaptive --provider "$p" --cpu-slots "$s" --keys 0 --keyspace "$KEYS" \
				--clients "$CLIENTS" --duration "$DURATION" --warmup "$WARMUP" \
				--server-pid "$server_pid" --no-progress -w json >"$OUT/$rep-$w-$p-$s.json"
		done
	done
done

echo
echo "CPUSlots: YCSB $WORKLOADS (cellctl bench --workload ycsb-X --mode adaptive), $KEYS keys, $CLIENTS clients, $DURATION after $WARMUP,"
echo "one cellserver --cores 1 (RF 1, log synced), unpinned; started $start, load average $load0 at the start, $(cut -d' ' -f1 /proc/loadavg) at the end."
echo
echo "| repeat | workload | provider | cpu-slots | ops/s | per kind: p50 / p99 µs | server-side hops | client CPU µs/op | server CPU µs/op |"
echo "|---|---|---|---:|---:|---|---:|---:|---:|"
for f in "$OUT"/*.json; do
	b=$(basename "$f" .json)
	IFS=- read -r rep w p s <<<"$b"
	jq -r --arg rep "$rep" --arg s "$s" '
		"| \($rep) | \(.params.workload) | \(.params.provider) | \($s) | \(.throughput|floor) | " +
		([.by_op | to_entries[] | "\(.key) \(.value.p50_ns/1000|floor) / \(.value.p99_ns/1000|floor)"] | join(", ")) +
		" | \(if .server_side_fraction < 0 then "-" else "\(.server_side_fraction*1000|floor/10)%" end) | \(.client_cpu_us_per_op*10|floor/10) | \(if .server_cpu_us_per_op then (.server_cpu_us_per_op*10|floor/10) else "-" end) |"' "$f"
done | sort -t'|' -k3,3 -k2,2 -k4,4 -k5,5
echo
echo "JSON of every run: $OUT"
