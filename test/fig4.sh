#!/usr/bin/env bash
# fig4.sh: the Cell paper's Fig. 4 on this machine, in one run.
#
# One cellserver (--cores 1: one worker doing tree work) holding one
# meganode, pinned to CPU $SERVER_CPU; cellctl bench pinned to CPU
# $CLIENT_CPU, caching off, gets of $KEYS stored keys, for each of:
# server-only, client-only over tcp, client-only over shm, adaptive over
# tcp, adaptive over shm. Prints throughput, p50, p99, the fraction of
# meganode hops done server-side and the server's CPU seconds per
# operation (utime+stime of the cellserver from /proc/PID/stat, read by
# cellctl bench --server-pid at both ends of the measured window), then
# adaptive against the best single mode for each provider.
#
# Usage (from anywhere in the repository): test/fig4.sh
# Environment: DURATION (10s), WARMUP (2s), KEYS (100000), VALUE_SIZE (64),
# CLIENTS (4), IN_FLIGHT (4), CONNS (1), REPEAT (1), HUGEPAGES (auto),
# BIN (a directory with cellserver and cellctl already built; default: go
# build them from the working tree),
# SERVER_CPU (0), CLIENT_CPU (1), BASE_PORT (27070), OUT (a temp dir:
# the JSON of every run).
set -euo pipefail

DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-2s}
KEYS=${KEYS:-100000}
VALUE_SIZE=${VALUE_SIZE:-64}
CLIENTS=${CLIENTS:-4}
IN_FLIGHT=${IN_FLIGHT:-4}
CONNS=${CONNS:-1}
REPEAT=${REPEAT:-1}
HUGEPAGES=${HUGEPAGES:-auto}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
BASE_PORT=${BASE_PORT:-27070}

root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d -t cell-fig4-XXXXXX)
OUT=${OUT:-$work/out}
mkdir -p "$OUT"
server_pid=
region_file=

cleanup() {
	if [[ -n $server_pid ]] && kill -0 "$server_pid" 2>/dev/null; then
		kill -TERM "$server_pid"
		for _ in $(seq 100); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.2; done
		kill -KILL "$server_pid" 2>/dev/null || true
	fi
	# A clean shutdown keeps the region file for the next start; with
	# hugepages it lives outside the data directory (hugetlbfs, /dev/shm).
	[[ -n $region_file ]] && rm -f "$region_file"
	rm -rf "$work/bin" "$work/data"
}
trap cleanup EXIT

if [[ -n ${BIN:-} ]]; then
	mkdir -p "$work/bin" && cp "$BIN/cellserver" "$BIN/cellctl" "$work/bin/"
else
	echo "# building cellserver and cellctl" >&2
	(cd "$root" && go build -o "$work/bin/cellserver" ./cmd/cellserver && go build -o "$work/bin/cellctl" ./cmd/cellctl)
fi

etcd=127.0.0.1:$((BASE_PORT + 9))
taskset -c "$SERVER_CPU" "$work/bin/cellserver" --data-dir "$work/data" --cores 1 --hugepages "$HUGEPAGES" \
	--listen 127.0.0.1:$BASE_PORT --rdma-listen 127.0.0.1:$((BASE_PORT + 1)) --metrics-listen 127.0.0.1:$((BASE_PORT + 2)) --raft-listen 127.0.0.1:$((BASE_PORT + 3)) \
	--etcd-listen "$etcd" --etcd-peer-listen 127.0.0.1:$((BASE_PORT + 10)) \
	--region-size 256MiB --meganode-size 64MiB --log-level warn 2>"$OUT/cellserver.log" &
server_pid=$!

ctl() { taskset -c "$CLIENT_CPU" "$work/bin/cellctl" --endpoints "$etcd" "$@"; }

deadline=$((SECONDS + 60))
until ctl status --command-timeout 1s >/dev/null 2>&1; do
	if ((SECONDS > deadline)) || ! kill -0 "$server_pid" 2>/dev/null; then
		echo "cellserver did not start:" >&2
		cat "$OUT/cellserver.log" >&2
		exit 1
	fi
	sleep 0.2
done

region_file=$(ctl status -w json | jq -r '.servers[0].regions[0].path')
echo "# region file $region_file; storing $KEYS keys" >&2
ctl bench --workload put --keys "$KEYS" --keyspace "$KEYS" --value-size "$VALUE_SIZE" --duration 100ms --warmup 0s --no-progress >/dev/null
ctl status | tee "$OUT/status.txt" | sed -n '/^Meganodes/,$p' >&2

common=(--workload get --keys 0 --keyspace "$KEYS" --cache off --clients "$CLIENTS" --in-flight "$IN_FLIGHT" --conns "$CONNS"
	--duration "$DURATION" --warmup "$WARMUP" --server-pid "$server_pid" --no-progress -w json)
# "adaptive tcp paper" and "adaptive shm paper" are adaptive with
# --paper-rule: the paper's rule as stated (searches on tcp servers,
# whose reads cost the server CPU, and exploration with p = 1% without
# Cell's cap in time: locality doc.go), side by side.
runs=("server tcp" "client tcp" "client shm" "adaptive tcp" "adaptive shm" "adaptive tcp paper" "adaptive shm paper")

for rep in $(seq "$REPEAT"); do
	for r in "${runs[@]}"; do
		set -- $r
		echo "# run $rep: mode $1, provider $2 ${3:-}" >&2
		extra=()
		[[ ${3:-} == paper ]] && extra=(--paper-rule)
		ctl bench --mode "$1" --provider "$2" "${extra[@]}" "${common[@]}" >"$OUT/$rep-$1-$2${3:+-$3}.json"
	done
done

echo
echo "Fig. 4: gets of $KEYS keys (${VALUE_SIZE}-byte values), one meganode, --cores 1 on CPU $SERVER_CPU, cellctl on CPU $CLIENT_CPU,"
echo "caching off, $CLIENTS clients × $IN_FLIGHT in flight ($CONNS conns each), $DURATION measured after $WARMUP; height $(jq -r '.servers[0].height' <(ctl status -w json))"
echo
echo "| run | mode | provider | throughput (ops/s) | p50 (µs) | p99 (µs) | server-side hops | server CPU µs/op | client CPU µs/op | retries |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for rep in $(seq "$REPEAT"); do
	for r in "${runs[@]}"; do
		set -- $r
		jq -r --arg rep "$rep" '"| \($rep) | \(.params.mode)\(if .params.paper_rule then " (paper rule)" else "" end) | \(.params.provider) | \(.throughput|floor) | \(.p50_ns/1000*10|floor/10) | \(.p99_ns/1000*10|floor/10) | \(if .server_side_fraction < 0 then "-" else "\(.server_side_fraction*1000|floor/10)%" end) | \((.server_cpu_us_per_op // 0)*100|floor/100) | \(.client_cpu_us_per_op*100|floor/100) | \([.retries|to_entries[]|select(.value>0)|"\(.key)=\(.value)"]|join(" ")) |"' "$OUT/$rep-$1-$2${3:+-$3}.json"
	done
done
echo
# Medians over the repeats (the machine is shared: a repeat runs the five
# modes back to back, so that a disturbance hits few of them), then
# adaptive against the best single mode, per provider.
if ((REPEAT > 1)); then
	echo "Medians of $REPEAT repeats:"
	echo
	echo "| mode | provider | throughput (ops/s) | p50 (µs) | p99 (µs) | server-side hops | server CPU µs/op | client CPU µs/op |"
	echo "|---|---|---|---|---|---|---|---|"
	for r in "${runs[@]}"; do
		set -- $r
		jq -rs '
			def median: sort | if length == 0 then null elif length % 2 == 1 then .[length / 2 | floor] else (.[length / 2 - 1] + .[length / 2]) / 2 end;
			def m(f): [.[] | f] | median;
			"| \(.[0].params.mode)\(if .[0].params.paper_rule then " (paper rule)" else "" end) | \(.[0].params.provider) | \(m(.throughput)|floor) | \(m(.p50_ns)/100|floor/10) | \(m(.p99_ns)/100|floor/10) | \(m(.server_side_fraction)*1000|floor/10)% | \(m(.server_cpu_us_per_op // 0)*100|floor/100) | \(m(.client_cpu_us_per_op)*100|floor/100) |"' "$OUT"/*-"$1"-"$2"${3:+-$3}.json
	done
	echo
fi
for p in tcp shm; do
	jq -rs --arg p "$p" '
		def median: sort | if length == 0 then null elif length % 2 == 1 then .[length / 2 | floor] else (.[length / 2 - 1] + .[length / 2]) / 2 end;
		def tp(m; paper): [.[] | select(.params.mode == m and (m == "server" or .params.provider == $p) and ((.params.paper_rule // false) == paper)) | .throughput] | median;
		(tp("server"; false)) as $s | (tp("client"; false)) as $c | (tp("adaptive"; false)) as $a | (tp("adaptive"; true)) as $pa | ([$s, $c] | max) as $best |
		"\($p): adaptive \($a|floor) ops/s = \($a / $best * 1000 | floor / 1000) × the best single mode (\(if $s >= $c then "server-only" else "client-only" end), \($best|floor) ops/s)" +
		(if $pa then "; paper rule \($pa|floor) ops/s = \($pa / $best * 1000 | floor / 1000) ×" else "" end)' "$OUT"/*-*-*.json
done
echo "(JSON of every run: $OUT)"
