#!/usr/bin/env bash
# build-compare.sh: two builds of Cell side by side, alternated in one run,
# so that a change that must not slow anything (a refactoring) is judged
# against the machine's noise, not against a figure from another day.
#
# For each of $REPEAT rounds, and each build in turn (A, then B; B first
# in odd rounds): start a cluster of $SERVERS_RF1 servers with --replicas
# 1, then of $SERVERS_RF3 with --replicas 3 (test/cluster.bash, servers
# pinned to $SERVER_CPUS, cellctl to $CLIENT_CPUS), store $KEYS keys, and
# run cellctl bench for each workload in $WORKLOADS for $DURATION. Then,
# on the RF 3 cluster, a kill drill: cellctl drill --fault kill --target
# leader, its unavailability. Prints one row per (round, build, RF,
# workload): ops/s, p50, p99; and per (round, build) the drill's
# unavailability. Every run's JSON stays in $OUT.
#
# Usage: A=/path/to/old/bin B=/path/to/new/bin test/build-compare.sh
# (each a directory holding cellserver and cellctl; build them with
# `git worktree add /tmp/old <commit> && go build -o /tmp/old/bin/
# ./cmd/cellserver ./cmd/cellctl`).
# Environment: REPEAT (3), KEYS (50000), DURATION (10s), WORKLOADS ("put
# get ycsb-a ycsb-c"), SERVERS_RF1 (1), SERVERS_RF3 (3), CLIENTS (8),
# DRILL (1: run the kill drill; 0: skip), RFS ("1 3": the replication
# factors to run), SERVER_CPUS (0), CLIENT_CPUS
# (1), BASE_PORT (29100), OUT (a temp dir).
set -euo pipefail

: "${A:?A=directory of the first build's cellserver and cellctl}"
: "${B:?B=directory of the second build's}"
REPEAT=${REPEAT:-3}
KEYS=${KEYS:-50000}
DURATION=${DURATION:-10s}
WORKLOADS=${WORKLOADS:-put get ycsb-a ycsb-c}
SERVERS_RF1=${SERVERS_RF1:-1}
SERVERS_RF3=${SERVERS_RF3:-3}
CLIENTS=${CLIENTS:-8}
DRILL=${DRILL:-1}
RFS=${RFS:-1 3}
BASE_PORT=${BASE_PORT:-29100}
MEGANODE_SIZE=${MEGANODE_SIZE:-4MiB}

# shellcheck source=test/cluster.bash
source "$(dirname "$0")/cluster.bash"
BIN=$A cluster_init build-compare
OUT=${OUT:-$work/out}
mkdir -p "$OUT"

# use BUILD: put BUILD's binaries where cluster.bash runs them.
use() { cp "$1/cellserver" "$1/cellctl" "$work/bin/"; }

# bench_cluster TAG N RF: a cluster of N servers at --replicas RF, loaded,
# every workload run once; with RF 3 and DRILL, a kill drill after.
bench_cluster() {
	local tag=$1 n=$2 rf=$3 w
	SERVER_FLAGS="--replicas $rf --raft-heartbeat-timeout 300ms" cluster_start "$n" "$OUT/$tag-logs"
	ctl bench --workload put --keys "$KEYS" --keyspace "$KEYS" --duration 100ms --warmup 0s --no-progress -w json >"$OUT/$tag-load.json"
	for w in $WORKLOADS; do
		ctl bench --workload "$w" --keyspace "$KEYS" --keys 0 --clients "$CLIENTS" --duration "$DURATION" --warmup 1s \
			--no-progress -w json >"$OUT/$tag-$w.json"
		jq -r --arg tag "$tag" --arg w "$w" '"\($tag) \($w) \(.throughput | floor) ops/s p50 \(.p50_ns / 1000 | floor) µs p99 \(.p99_ns / 1000 | floor) µs errors \(.errors)"' "$OUT/$tag-$w.json"
	done
	cluster_stop
	if [[ $rf == 3 && $DRILL == 1 ]]; then
		taskset -c "$SERVER_CPUS,$CLIENT_CPUS" "$work/bin/cellctl" drill --local 3 --cellserver "$work/bin/cellserver" --keys 300 --clients 4 \
			--fault kill --target leader --fault-at 3s --fault-duration 4s --after 4s -w json >"$OUT/$tag-drill.json" 2>"$OUT/$tag-drill.err" || true
		jq -r --arg tag "$tag" '"\($tag) drill unavailable \(.faults[0].unavailable_ns / 1e6 | floor) ms, lost \(.lost | length), \(.linearizability.verdict)"' \
			"$OUT/$tag-drill.json" 2>/dev/null || echo "$tag drill: no report ($(tail -n1 "$OUT/$tag-drill.err"))"
	fi
}

for ((r = 1; r <= REPEAT; r++)); do
	order="A B"
	((r % 2 == 0)) && order="B A"
	for b in $order; do
		dir=$A
		[[ $b == B ]] && dir=$B
		use "$dir"
		for rf in $RFS; do
			n=$SERVERS_RF1
			((rf == 3)) && n=$SERVERS_RF3
			bench_cluster "r$r-$b-rf$rf" "$n" "$rf"
		done
	done
done
echo "# runs in $OUT" >&2
