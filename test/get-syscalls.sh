#!/usr/bin/env bash
# get-syscalls.sh: read and write system calls and server CPU per
# server-side get of one cellserver (docs/bench-history.md §21). The server runs
# pinned to CPU 0 with --cores 1, the load generator to CPU 1; after
# 100,000 keys of 64-byte values are stored, `cellctl bench --mode server
# --workload get --clients 16 --conns 1 --in-flight 1|16` runs for 8 s
# each, and /proc/PID/io's syscr and syscw around it are divided by the
# gets done.
#
# Usage: test/get-syscalls.sh [BIN]. BIN: a directory with cellserver and
# cellctl already built (default: go build them from the working tree).
# Environment: BASE_PORT (28170), DURATION (8s). Needs jq and taskset.
set -euo pipefail

BASE_PORT=${BASE_PORT:-28170}
DURATION=${DURATION:-8s}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d -t cell-syscalls-XXXXXX)
pid=
cleanup() {
	if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid"
		wait "$pid" 2>/dev/null || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT

BIN=${1:-}
if [[ -z $BIN ]]; then
	BIN=$work/bin
	(cd "$root" && go build -o "$BIN/" ./cmd/cellserver ./cmd/cellctl)
fi
etcd=127.0.0.1:$((BASE_PORT + 9))
taskset -c 0 "$BIN/cellserver" --data-dir "$work/data" --cores 1 --hugepages off \
	--listen 127.0.0.1:$BASE_PORT --rdma-listen 127.0.0.1:$((BASE_PORT + 1)) --metrics-listen "" --raft-listen 127.0.0.1:$((BASE_PORT + 3)) \
	--etcd-listen "$etcd" --etcd-peer-listen 127.0.0.1:$((BASE_PORT + 10)) \
	--region-size 256MiB --meganode-size 64MiB --log-level warn 2>"$work/cellserver.log" &
pid=$!
ctl() { taskset -c 1 "$BIN/cellctl" --endpoints "$etcd" "$@"; }
deadline=$((SECONDS + 60))
until ctl status --command-timeout 1s >/dev/null 2>&1; do
	((SECONDS < deadline)) && kill -0 "$pid" 2>/dev/null || { cat "$work/cellserver.log" >&2; exit 1; }
	sleep 0.2
done
ctl bench --workload put --keys 100000 --keyspace 100000 --value-size 64 --duration 100ms --warmup 0s --no-progress >/dev/null
io() { awk -v k="$1" '$1 == k ":" { print $2 }' "/proc/$pid/io"; }
for P in 1 16; do
	r0=$(io syscr) w0=$(io syscw)
	ctl bench --mode server --workload get --keys 0 --keyspace 100000 --clients 16 --conns 1 --in-flight "$P" \
		--duration "$DURATION" --warmup 0s --server-pid "$pid" --no-progress -w json >"$work/bench.json"
	r1=$(io syscr) w1=$(io syscw)
	n=$(jq -r .ops "$work/bench.json")
	tp=$(jq -r .throughput "$work/bench.json")
	cpu=$(jq -r .server_cpu_us_per_op "$work/bench.json")
	awk -v P="$P" -v r=$((r1 - r0)) -v w=$((w1 - w0)) -v n="$n" -v tp="$tp" -v cpu="$cpu" \
		'BEGIN { printf "in-flight %2d: %.0f gets/s, %.2f µs server CPU/get, %.2f reads/get, %.2f writes/get\n", P, tp, cpu, r / n, w / n }'
done
