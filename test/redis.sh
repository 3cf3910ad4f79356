#!/usr/bin/env bash
# redis.sh: server-side get throughput of one Cell server core against
# redis-server GET on the same machine, with the same client concurrency,
# without and with pipelining.
#
# Both servers are pinned to CPU $SERVER_CPU (cellserver --cores 1; Go then
# runs with GOMAXPROCS=1) and both load generators to CPU $CLIENT_CPU:
#
#   redis-benchmark -t get -c $CLIENTS -P 1|16 (-r $KEYS random keys of
#     SET-preloaded ${VALUE_SIZE}-byte values)
#   cellctl bench --mode server --workload get --clients $CLIENTS --conns 1
#     --in-flight 1|16 (the same number of connections, each with 1 or 16
#     requests outstanding)
#
# For each, the throughput, p50 and p99, and the server process's CPU time
# per GET (utime+stime from /proc/PID/stat around the measured run): with
# two cores the load generator can be the bottleneck, and CPU per op is
# then the server's capacity that throughput does not show.
#
# Usage: test/redis.sh. Installs redis-server and redis-tools with apt-get
# if they are missing. Environment: CLIENTS (16), KEYS (100000),
# VALUE_SIZE (64), DURATION (10s, Cell), REDIS_N1 (1000000) and REDIS_N16
# (6000000) requests for redis-benchmark, SERVER_CPU (0), CLIENT_CPU (1),
# BASE_PORT (28070), BIN (a directory with cellserver and cellctl already
# built; default: go build them from the working tree).
set -euo pipefail

CLIENTS=${CLIENTS:-16}
KEYS=${KEYS:-100000}
VALUE_SIZE=${VALUE_SIZE:-64}
DURATION=${DURATION:-10s}
REDIS_N1=${REDIS_N1:-1000000}
REDIS_N16=${REDIS_N16:-6000000}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
BASE_PORT=${BASE_PORT:-28070}

if ! command -v redis-server >/dev/null || ! command -v redis-benchmark >/dev/null; then
	echo "# installing redis-server and redis-tools" >&2
	apt-get update -qq && apt-get install -y -qq redis-server redis-tools >/dev/null
fi

root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d -t cell-redis-XXXXXX)
pids=()
cleanup() {
	for p in "${pids[@]}"; do
		if kill -0 "$p" 2>/dev/null; then
			kill -TERM "$p"
			for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.2; done
			kill -KILL "$p" 2>/dev/null || true
		fi
	done
	rm -rf "$work"
}
trap cleanup EXIT

# cpu_ticks PID: utime+stime of PID in clock ticks (USER_HZ, 100/s).
cpu_ticks() { awk '{ sub(/.*\) /, ""); print $12 + $13 }' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)

# --- redis ---
rport=$((BASE_PORT + 20))
taskset -c "$SERVER_CPU" redis-server --port "$rport" --bind 127.0.0.1 --save "" --appendonly no --daemonize no >"$work/redis.log" 2>&1 &
redis_pid=$!
pids+=("$redis_pid")
deadline=$((SECONDS + 20))
until redis-cli -p "$rport" ping >/dev/null 2>&1; do
	((SECONDS < deadline)) || { cat "$work/redis.log" >&2; exit 1; }
	sleep 0.1
done
echo "# redis: storing $KEYS keys" >&2
taskset -c "$CLIENT_CPU" redis-benchmark -p "$rport" -t set -r "$KEYS" -n $((KEYS * 3)) -d "$VALUE_SIZE" -c "$CLIENTS" -P 16 -q >/dev/null
declare -A redis_rps redis_p50 redis_p99 redis_cpu
for P in 1 16; do
	n=$REDIS_N1
	[[ $P == 16 ]] && n=$REDIS_N16
	echo "# redis: GET, -c $CLIENTS -P $P -n $n" >&2
	before=$(cpu_ticks "$redis_pid")
	line=$(taskset -c "$CLIENT_CPU" redis-benchmark -p "$rport" -t get -r "$KEYS" -n "$n" -d "$VALUE_SIZE" -c "$CLIENTS" -P "$P" --csv | tail -1)
	after=$(cpu_ticks "$redis_pid")
	IFS=, read -r _ rps _ _ p50 _ p99 _ <<<"${line//\"/}"
	redis_rps[$P]=$rps
	redis_p50[$P]=$(awk -v v="$p50" 'BEGIN { printf "%.1f", v * 1000 }')
	redis_p99[$P]=$(awk -v v="$p99" 'BEGIN { printf "%.1f", v * 1000 }')
	redis_cpu[$P]=$(awk -v t=$((after - before)) -v hz="$hz" -v n="$n" 'BEGIN { printf "%.2f", t / hz / n * 1e6 }')
done
kill -TERM "$redis_pid"

# --- Cell ---
if [[ -n ${BIN:-} ]]; then
	cp "$BIN/cellserver" "$BIN/cellctl" "$work/"
else
	echo "# building cellserver and cellctl" >&2
	(cd "$root" && go build -o "$work/cellserver" ./cmd/cellserver && go build -o "$work/cellctl" ./cmd/cellctl)
fi
etcd=127.0.0.1:$((BASE_PORT + 9))
taskset -c "$SERVER_CPU" "$work/cellserver" --data-dir "$work/data" --cores 1 --hugepages off \
	--listen 127.0.0.1:$BASE_PORT --rdma-listen 127.0.0.1:$((BASE_PORT + 1)) --metrics-listen "" --raft-listen 127.0.0.1:$((BASE_PORT + 3)) \
	--etcd-listen "$etcd" --etcd-peer-listen 127.0.0.1:$((BASE_PORT + 10)) \
	--region-size 256MiB --meganode-size 64MiB --log-level warn 2>"$work/cellserver.log" &
cell_pid=$!
pids+=("$cell_pid")
ctl() { taskset -c "$CLIENT_CPU" "$work/cellctl" --endpoints "$etcd" "$@"; }
deadline=$((SECONDS + 60))
until ctl status --command-timeout 1s >/dev/null 2>&1; do
	((SECONDS < deadline)) && kill -0 "$cell_pid" 2>/dev/null || { cat "$work/cellserver.log" >&2; exit 1; }
	sleep 0.2
done
echo "# cell: storing $KEYS keys" >&2
ctl bench --workload put --keys "$KEYS" --keyspace "$KEYS" --value-size "$VALUE_SIZE" --duration 100ms --warmup 0s --no-progress >/dev/null
declare -A cell_rps cell_p50 cell_p99 cell_cpu
for P in 1 16; do
	echo "# cell: get, server-side, --clients $CLIENTS --conns 1 --in-flight $P" >&2
	ctl bench --mode server --workload get --keys 0 --keyspace "$KEYS" --clients "$CLIENTS" --conns 1 --in-flight "$P" \
		--duration "$DURATION" --warmup 1s --server-pid "$cell_pid" --no-progress -w json >"$work/cell-$P.json"
	cell_rps[$P]=$(jq -r '.throughput' "$work/cell-$P.json")
	cell_p50[$P]=$(jq -r '.p50_ns / 1000 * 10 | floor / 10' "$work/cell-$P.json")
	cell_p99[$P]=$(jq -r '.p99_ns / 1000 * 10 | floor / 10' "$work/cell-$P.json")
	cell_cpu[$P]=$(jq -r '(.server_cpu_us_per_op // 0) * 100 | floor / 100' "$work/cell-$P.json")
done

echo
echo "GET of $KEYS keys (${VALUE_SIZE}-byte values), server on CPU $SERVER_CPU, load generator on CPU $CLIENT_CPU, $CLIENTS connections"
echo
echo "| server | pipelining | throughput (ops/s) | p50 (µs) | p99 (µs) | server CPU µs/op |"
echo "|---|---|---|---|---|---|"
for P in 1 16; do
	printf '| redis-server | -P %s | %.0f | %s | %s | %s |\n' "$P" "${redis_rps[$P]}" "${redis_p50[$P]}" "${redis_p99[$P]}" "${redis_cpu[$P]}"
	printf '| cellserver --cores 1 | --in-flight %s | %.0f | %s | %s | %s |\n' "$P" "${cell_rps[$P]}" "${cell_p50[$P]}" "${cell_p99[$P]}" "${cell_cpu[$P]}"
done
echo
for P in 1 16; do
	awk -v P="$P" -v cr="${cell_rps[$P]}" -v rr="${redis_rps[$P]}" -v cc="${cell_cpu[$P]}" -v rc="${redis_cpu[$P]}" \
		'BEGIN { printf "pipelining %2d: Cell/redis throughput %.2f; server CPU per GET Cell/redis %.2f (one core could serve %.0fK Cell GETs/s vs %.0fK redis GETs/s)\n", P, cr / rr, cc / rc, 1e3 / cc, 1e3 / rc }'
done
