#!/bin/bash
# truncate-bench.sh: what truncating a long log behind a snapshot costs a
# server (BENCHMARKS.md §7). One cellserver (embedded etcd, --cores 1,
# a 2 GiB region, pinned to CPU $SERVER_CPUS) is loaded with $KEYS keys of
# 998-byte values with snapshots off (1 GiB, one log of about a million
# entries), restarted with a snapshot every 20,000 entries (its first
# snapshot truncates the whole load), and then put to by 16 clients
# (pinned to $CLIENT_CPUS) for $DURATION, while pebble's compaction
# seconds are read from /metrics every 250 ms. Prints the compaction
# seconds between the restart and the run, and in the run, and the run's
# puts/s and latencies.
#
# Usage: test/truncate-bench.sh NAME [BIN]   (BIN: a directory holding
# cellserver and cellctl; default: built from this tree). Compare builds
# by running it once per BIN, in both orders.
# Settings: KEYS (1000000), DURATION (20s), SERVER_CPUS (0), CLIENT_CPUS
# (1), BASE_PORT (28700), TMPDIR (/var/tmp: the data directory).
set -euo pipefail
NAME=${1:?usage: $0 NAME [BIN]}
BIN=${2:-}
KEYS=${KEYS:-1000000} DURATION=${DURATION:-20s}
SERVER_CPUS=${SERVER_CPUS:-0} CLIENT_CPUS=${CLIENT_CPUS:-1} BASE_PORT=${BASE_PORT:-28700}
root=$(cd "$(dirname "$0")/.." && pwd)
out=$(mktemp -d "${TMPDIR:-/var/tmp}/cell-truncate-XXXXXX")
data=$out/data
if [[ -z $BIN ]]; then
	BIN=$out/bin
	(cd "$root" && go build -o "$BIN/" ./cmd/cellserver ./cmd/cellctl)
fi
p=$BASE_PORT
ports=(--listen 127.0.0.1:$p --rdma-listen 127.0.0.1:$((p + 1)) --metrics-listen 127.0.0.1:$((p + 2))
	--raft-listen 127.0.0.1:$((p + 3)) --etcd-listen 127.0.0.1:$((p + 4)) --etcd-peer-listen 127.0.0.1:$((p + 5)))
metrics=http://127.0.0.1:$((p + 2))/metrics
pid= starts=0
cleanup() {
	[[ -z $pid ]] || { kill -KILL "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; }
	"$BIN/cellserver" wipe --data-dir "$data" >/dev/null 2>&1 || true
	rm -rf "$data"
}
trap cleanup EXIT
start() {
	starts=$((starts + 1))
	taskset -c "$SERVER_CPUS" "$BIN/cellserver" --data-dir "$data" "${ports[@]}" --cores 1 --region-size 2GiB \
		--snapshot-log-bytes 1TiB "$@" --log-level info 2>>"$out/server.log" &
	pid=$!
	until (($(grep -c 'msg="server: serving"' "$out/server.log" || true) >= starts)); do
		kill -0 "$pid" 2>/dev/null || { tail -n 20 "$out/server.log" >&2; exit 1; }
		sleep 0.1
	done
}
stop() { kill -TERM "$pid"; wait "$pid" || true; pid=; }
ctl() { taskset -c "$CLIENT_CPUS" "$BIN/cellctl" --endpoints 127.0.0.1:$((p + 4)) "$@"; }
compaction_s() { curl -s --max-time 5 "$metrics" | awk '$1 == "cell_wal_compaction_seconds_total" { print $2 }'; }

start --snapshot-threshold 1000000000000 --snapshot-interval 1h
t0=$SECONDS
ctl bench --workload put --keys "$KEYS" --keyspace "$KEYS" --value-size 998 --clients 16 --duration 100ms --warmup 0s \
	--no-progress -w json >"$out/load.json"
echo "# $NAME: $KEYS keys loaded in $((SECONDS - t0)) s" >&2
stop
start --snapshot-threshold 20000 --snapshot-interval 1s
( while kill -0 "$pid" 2>/dev/null; do echo "$(date +%s.%N) $(compaction_s)"; sleep 0.25; done ) >"$out/compaction.txt" 2>/dev/null &
mon=$!
before=$(compaction_s)
ctl bench --workload put --keys 0 --keyspace "$KEYS" --value-size 998 --clients 16 --duration "$DURATION" --warmup 0s \
	--no-progress -w json >"$out/run.json"
after=$(compaction_s)
kill "$mon" 2>/dev/null || true
stop
jq -c --arg name "$NAME" --argjson before "${before:-0}" --argjson after "${after:-0}" \
	'{name: $name, compaction_s_restart: $before, compaction_s_run: ($after - $before), puts_per_s: .throughput,
	  p50_ms: (.p50_ns / 1e6), p99_ms: (.p99_ns / 1e6), max_ms: (.max_ns / 1e6)}' "$out/run.json"
grep -o 'compacting logs: .*' "$out/server.log" | head -n 3 | sed 's/^/# /' >&2
echo "# logs and series in $out" >&2
