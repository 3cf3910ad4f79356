#!/usr/bin/env bash
# fig8.sh: the Cell paper's Fig. 8 on this machine: read latency while
# meganodes split.
#
# For each of $RUNS (mode and provider), $REPEAT times, on a fresh cluster
# of $SERVERS cellservers (test/cluster.bash; --cores 1 each, small
# meganodes): store $KEYS keys, then run a reader, cellctl bench
# --workload get over those keys, measured in three phases: "before"
# ($BEFORE, the reader alone), "splits" ($DURATION, while a writer runs)
# and "after" ($AFTER), with a time series every $INTERVAL. The writer,
# a second cellctl bench --workload put with the same mode and provider,
# starts $BEFORE into the reader's measured window and stores fresh keys
# for $DURATION: keys bench/000000AAAAAABBBBBB, each sorting right after
# the reader's key bench/000000AAAAAA, so they land in the meganodes the
# reader reads and keep splitting them. Every meganode split is counted
# from the servers' /metrics (cell_server_meganode_splits_total).
#
# Prints, per run, each phase's reader throughput, p50, p90, p99, fraction
# of server-side hops, errors and retries; the writer's puts/s; the splits
# (remote ones: placed on another server) and their mean duration; the
# meganodes per server before and after; then the reader's p50 and p99
# per interval, the runs side by side (the figure's shape). The writer's
# measured start is printed against the planned one ($BEFORE): the two
# processes are lined up by wall clock, to within their connection time.
#
# Servers are pinned to $SERVER_CPUS, reader and writer to $CLIENT_CPUS:
# the writer competes with the reader for the client CPU too (see the
# shm rows, whose reads do not use the server's CPU).
#
# Usage: test/fig8.sh
# Environment: SERVERS (2), KEYS (100000; at most 1000000), VALUE_SIZE
# (64), DURATION (5s; durations are whole or decimal seconds, "5s" or
# "5"), BEFORE (= DURATION), AFTER (= DURATION), WARMUP (1s), INTERVAL
# (250ms), REPEAT (1), RUNS ("server/tcp adaptive/tcp adaptive/shm"),
# READER_CLIENTS (4), READER_IN_FLIGHT (2), WRITER_CLIENTS (4),
# WRITER_IN_FLIGHT (4), CACHE (on), MEGANODE_SIZE (2MiB), REGION_SIZE
# (256MiB), HUGEPAGES (auto), SERVER_CPUS (0), CLIENT_CPUS (1), BASE_PORT
# (28300), BIN, OUT (a temp dir: every run's JSON and server logs).
set -euo pipefail

SERVERS=${SERVERS:-2}
KEYS=${KEYS:-100000}
VALUE_SIZE=${VALUE_SIZE:-64}
DURATION=${DURATION:-5s}
BEFORE=${BEFORE:-$DURATION}
AFTER=${AFTER:-$DURATION}
WARMUP=${WARMUP:-1s}
INTERVAL=${INTERVAL:-250ms}
REPEAT=${REPEAT:-1}
RUNS=${RUNS:-server/tcp adaptive/tcp adaptive/shm}
READER_CLIENTS=${READER_CLIENTS:-4}
READER_IN_FLIGHT=${READER_IN_FLIGHT:-2}
WRITER_CLIENTS=${WRITER_CLIENTS:-4}
WRITER_IN_FLIGHT=${WRITER_IN_FLIGHT:-4}
CACHE=${CACHE:-on}
MEGANODE_SIZE=${MEGANODE_SIZE:-2MiB}
BASE_PORT=${BASE_PORT:-28300}

if ((KEYS > 1000000)); then
	echo "KEYS $KEYS: at most 1000000 (the writer's keys extend the reader's 6-digit key numbers)" >&2
	exit 2
fi
secs() { local v=${1%s}; echo "$v"; }
BEFORE_S=$(secs "$BEFORE") DURATION_S=$(secs "$DURATION") AFTER_S=$(secs "$AFTER") WARMUP_S=$(secs "$WARMUP")

# shellcheck source=test/cluster.bash
source "$(dirname "$0")/cluster.bash"
cluster_init fig8
OUT=${OUT:-$work/out}
mkdir -p "$OUT"
writer_pid=
reader_pid=
fig8_cleanup() {
	local p
	for p in $writer_pid $reader_pid; do
		kill -TERM "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
	cluster_cleanup
}
trap fig8_cleanup EXIT
minus() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.6g", a - b}'; }

for rep in $(seq "$REPEAT"); do
	for r in $RUNS; do
		mode=${r%/*} provider=${r#*/}
		run=$rep-$mode-$provider
		echo "# run $rep, mode $mode, provider $provider: $SERVERS server(s), storing $KEYS keys" >&2
		cluster_start "$SERVERS" "$OUT/$run-logs"
		ctl bench --workload put --keys "$KEYS" --keyspace "$KEYS" --value-size "$VALUE_SIZE" --duration 100ms --warmup 0s \
			--no-progress >/dev/null
		splits0=$(cluster_counter cell_server_meganode_splits_total '{result="done"}')
		remote0=$(cluster_counter cell_server_meganode_splits_total '{result="remote"}')
		stime0=$(cluster_counter cell_server_meganode_split_seconds_sum '')
		mn0=$(cluster_meganodes)
		load1=$(loadavg)
		echo "# meganodes per server $mn0; reader for ${BEFORE}+${DURATION}+${AFTER} after $WARMUP, writer from $BEFORE for $DURATION" >&2

		common=(--mode "$mode" --provider "$provider" --cache "$CACHE" --value-size "$VALUE_SIZE" --no-progress -w json)
		taskset -c "$CLIENT_CPUS" "$work/bin/cellctl" --endpoints "$etcd" bench --workload get --keys 0 --keyspace "$KEYS" --clients "$READER_CLIENTS" --in-flight "$READER_IN_FLIGHT" \
			--phases "before=$BEFORE_S""s,splits=$DURATION_S""s,after=$AFTER_S""s" --interval "$INTERVAL" --warmup "$WARMUP" \
			"${common[@]}" >"$OUT/$run-reader.json" &
		reader_pid=$! # taskset execs cellctl: the trap can stop it by this PID
		sleep "$(awk -v a="$WARMUP_S" -v b="$BEFORE_S" 'BEGIN {print a + b}')"
		taskset -c "$CLIENT_CPUS" "$work/bin/cellctl" --endpoints "$etcd" bench --workload put --keys 0 --keyspace $((KEYS * 1000000)) --key-prefix bench/000000 \
			--clients "$WRITER_CLIENTS" --in-flight "$WRITER_IN_FLIGHT" --duration "$DURATION_S""s" --warmup 0s \
			"${common[@]}" >"$OUT/$run-writer.json" &
		writer_pid=$!
		wait "$writer_pid"
		writer_pid=
		wait "$reader_pid"
		reader_pid=
		jq -n --arg mn0 "$mn0" --arg mn1 "$(cluster_meganodes)" --arg load1 "$load1" \
			--argjson splits "$(minus "$(cluster_counter cell_server_meganode_splits_total '{result="done"}')" "$splits0")" \
			--argjson remote "$(minus "$(cluster_counter cell_server_meganode_splits_total '{result="remote"}')" "$remote0")" \
			--argjson stime "$(minus "$(cluster_counter cell_server_meganode_split_seconds_sum '')" "$stime0")" \
			'{meganodes_before: $mn0, meganodes_after: $mn1, splits: $splits, remote: $remote, split_seconds: $stime, loadavg: $load1}' >"$OUT/$run-splits.json"
		cluster_stop
	done
done

echo
echo "Fig. 8: reader gets of $KEYS keys ($READER_CLIENTS clients × $READER_IN_FLIGHT in flight) before, while and after a writer stores fresh"
echo "interleaved keys ($WRITER_CLIENTS clients × $WRITER_IN_FLIGHT in flight) for $DURATION; $SERVERS cellserver(s) --cores 1 --meganode-size $MEGANODE_SIZE"
echo "pinned to CPU $SERVER_CPUS, reader and writer on CPU $CLIENT_CPUS; cache $CACHE; phases $BEFORE, $DURATION, $AFTER after $WARMUP of warmup"
echo
echo "| run | mode | provider | phase | reader ops/s | p50 µs | p90 µs | p99 µs | server-side hops | errors | retries | writer puts/s (p50/p99 µs, errors) | splits (remote), mean split ms | meganodes per server, before → after | writer start |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
for rep in $(seq "$REPEAT"); do
	for r in $RUNS; do
		mode=${r%/*} provider=${r#*/}
		run=$rep-$mode-$provider
		jq -r --arg rep "$rep" --arg before "$BEFORE_S" --slurpfile w "$OUT/$run-writer.json" --slurpfile s "$OUT/$run-splits.json" '
			def us: . / 1000 * 10 | floor / 10;
			. as $r | $w[0] as $w | $s[0] as $s |
			.phases[] | . as $p |
			"| \($rep) | \($r.params.mode) | \($r.params.provider) | \($p.name) | \($p.throughput|floor) | \($p.p50_ns|us) | \($p.p90_ns|us) | \($p.p99_ns|us) | \(if $p.server_side_fraction < 0 then "-" else "\($p.server_side_fraction*1000|floor/10)%" end) | \($p.errors) | \([($p.retries // {}) | to_entries[] | "\(.key)=\(.value)"] | join(" ")) | " +
			(if $p.name == "splits" then
				"\($w.throughput|floor) (\($w.p50_ns|us)/\($w.p99_ns|us), \($w.errors)) | \($s.splits) (\($s.remote)), \(if $s.splits > 0 then ($s.split_seconds / $s.splits * 1e4 | floor / 10) else "-" end) | \($s.meganodes_before) → \($s.meganodes_after) | \(($w.start_unix_ns - $r.start_unix_ns) / 1e7 | floor / 100)s (planned \($before)s) |"
			else " | | | |" end)' "$OUT/$run-reader.json"
	done
done
echo
for rep in $(seq "$REPEAT"); do
	for r in $RUNS; do
		mode=${r%/*} provider=${r#*/}
		jq -r '
			select(.first_error) | "run \(.params.mode)/\(.params.provider) \(.params.workload): first error: \(.first_error)"' \
			"$OUT/$rep-$mode-$provider-reader.json" "$OUT/$rep-$mode-$provider-writer.json"
	done
done
if ((REPEAT > 1)); then
	echo "Medians of $REPEAT repeats (reader):"
	echo
	echo "| mode | provider | phase | ops/s | p50 µs | p99 µs | server-side hops |"
	echo "|---|---|---|---|---|---|---|"
	for r in $RUNS; do
		mode=${r%/*} provider=${r#*/}
		jq -rs '
			def median: sort | if length % 2 == 1 then .[length / 2 | floor] else (.[length / 2 - 1] + .[length / 2]) / 2 end;
			. as $runs | $runs[0].phases | to_entries[] | .key as $i | .value.name as $name |
			[$runs[] | .phases[$i]] as $ps |
			"| \($runs[0].params.mode) | \($runs[0].params.provider) | \($name) | \([$ps[].throughput] | median | floor) | \([$ps[].p50_ns] | median / 100 | floor / 10) | \([$ps[].p99_ns] | median / 100 | floor / 10) | \([$ps[].server_side_fraction] | median * 1000 | floor / 10)% |"' \
			"$OUT"/*-"$mode-$provider"-reader.json
	done
	echo
fi

# The time series of the first repeat, runs side by side: reader p50 and
# p99 (µs) and server-side share per interval; * marks the writer's time.
header="| from (s) |" sep="|---|"
files=()
for r in $RUNS; do
	header+=" ${r} p50 | p99 | server-side |"
	sep+="---|---|---|"
	files+=("$OUT/1-${r%/*}-${r#*/}-reader.json")
done
echo "Reader latency every $INTERVAL (first repeat; * = writer running):"
echo
echo "$header"
echo "$sep"
jq -rs --arg b "$BEFORE_S" --arg d "$DURATION_S" '
	def us: . / 1000 | floor;
	(.[0].intervals | length) as $n | . as $runs |
	range(0; $n) as $i | $runs[0].intervals[$i].start_s as $t |
	"| \($t * 100 | round / 100)\(if $t >= ($b|tonumber) - 0.01 and $t < ($b|tonumber) + ($d|tonumber) - 0.01 then "*" else "" end) |" +
	([$runs[] | .intervals[$i] // null | if . then " \(.p50_ns|us) | \(.p99_ns|us) | \(if .server_side_fraction < 0 then "-" else "\(.server_side_fraction * 100 | floor)%" end) |" else " - | - | - |" end] | join(""))' \
	"${files[@]}"
echo
echo "Machine load (1-minute average) before each run: $(for rep in $(seq "$REPEAT"); do for r in $RUNS; do printf '%s %s; ' "$rep-$r" "$(jq -r .loadavg "$OUT/$rep-${r%/*}-${r#*/}-splits.json")"; done; done)(2 CPUs)"
echo "(JSON of every run and server logs: $OUT)"
