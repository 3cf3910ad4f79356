#!/usr/bin/env bash
# cluster-bench.sh: YCSB-B (95% gets, 5% puts, YCSB's scrambled zipfian
# keys) against clusters of 1, 2 and 4 cellservers on this host (issue #4).
#
# For each N in $SERVERS: start N servers on loopback (test/cluster.bash:
# the first embeds etcd, --cores 1 each, small meganodes so that loading
# the keys splits the tree across the servers: a server holding fewer
# than 4 meganodes places new ones on the least loaded other server),
# store $KEYS keys, then run cellctl bench --workload ycsb-b for each of
# $RUNS (mode and provider) for $DURATION after $WARMUP, $REPEAT times,
# and stop the cluster. Prints one row per (N, mode, provider, repeat):
# throughput, p50, p99 (all operations, then gets and puts apart), the
# fraction of meganode hops done server-side, errors, and how many
# meganodes each server holds (leaf meganodes in parentheses) with the
# splits the load caused (remote ones: placed on another server).
#
# All servers are pinned to $SERVER_CPUS and cellctl to $CLIENT_CPUS, so
# N servers share the same CPU: this measures what spreading the tree
# costs or saves with a fixed server CPU budget, not scale-out.
#
# Usage: test/cluster-bench.sh
# Environment: SERVERS ("1 2 4"), KEYS (200000), VALUE_SIZE (64),
# DURATION (10s), WARMUP (2s), REPEAT (1), RUNS ("server/tcp adaptive/tcp
# adaptive/shm"), CLIENTS (4), IN_FLIGHT (4), CONNS (1), CACHE (on),
# WORKLOAD (ycsb-b), MEGANODE_SIZE (4MiB), REGION_SIZE (256MiB),
# HUGEPAGES (auto), SERVER_CPUS (0), CLIENT_CPUS (1), BASE_PORT (28100),
# BIN, OUT (a temp dir: every run's JSON, status and server logs).
set -euo pipefail

SERVERS=${SERVERS:-1 2 4}
KEYS=${KEYS:-200000}
VALUE_SIZE=${VALUE_SIZE:-64}
DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-2s}
REPEAT=${REPEAT:-1}
RUNS=${RUNS:-server/tcp adaptive/tcp adaptive/shm}
CLIENTS=${CLIENTS:-4}
IN_FLIGHT=${IN_FLIGHT:-4}
CONNS=${CONNS:-1}
CACHE=${CACHE:-on}
WORKLOAD=${WORKLOAD:-ycsb-b}
BASE_PORT=${BASE_PORT:-28100}

# shellcheck source=test/cluster.bash
source "$(dirname "$0")/cluster.bash"
cluster_init cluster-bench
OUT=${OUT:-$work/out}
mkdir -p "$OUT"

for n in $SERVERS; do
	echo "# $n server(s): starting" >&2
	cluster_start "$n" "$OUT/N$n-logs"
	t0=$SECONDS
	ctl bench --workload put --keys "$KEYS" --keyspace "$KEYS" --value-size "$VALUE_SIZE" --duration 100ms --warmup 0s \
		--no-progress -w json >"$OUT/N$n-load.json"
	load_s=$((SECONDS - t0))
	ctl status -w json >"$OUT/N$n-status.json"
	jq -n --arg mn "$(cluster_meganodes)" --arg done "$(cluster_counter cell_server_meganode_splits_total '{result="done"}')" \
		--arg remote "$(cluster_counter cell_server_meganode_splits_total '{result="remote"}')" --argjson load_s "$load_s" \
		--arg load1 "$(loadavg)" \
		'{meganodes: $mn, splits: ($done|tonumber), remote: ($remote|tonumber), load_s: $load_s, loadavg: $load1}' >"$OUT/N$n-tree.json"
	echo "# $n server(s): $KEYS keys stored in ${load_s}s; meganodes per server $(jq -r .meganodes "$OUT/N$n-tree.json")" >&2
	for rep in $(seq "$REPEAT"); do
		for r in $RUNS; do
			mode=${r%/*} provider=${r#*/}
			echo "# $n server(s), run $rep: $WORKLOAD, mode $mode, provider $provider" >&2
			ctl bench --workload "$WORKLOAD" --mode "$mode" --provider "$provider" --keys 0 --keyspace "$KEYS" \
				--value-size "$VALUE_SIZE" --cache "$CACHE" --clients "$CLIENTS" --in-flight "$IN_FLIGHT" --conns "$CONNS" \
				--duration "$DURATION" --warmup "$WARMUP" --no-progress -w json >"$OUT/N$n-$rep-$mode-$provider.json"
		done
	done
	cluster_stop
done

echo
echo "$WORKLOAD: $KEYS keys (${VALUE_SIZE}-byte values), $CLIENTS clients × $IN_FLIGHT in flight ($CONNS conns per server), cache $CACHE,"
echo "$DURATION measured after $WARMUP; cellservers --cores 1 --meganode-size $MEGANODE_SIZE, all pinned to CPU $SERVER_CPUS; cellctl on CPU $CLIENT_CPUS"
echo
echo "| servers | run | mode | provider | ops/s | p50 µs | p99 µs | get p50/p99 µs | put p50/p99 µs | server-side hops | errors | meganodes per server | splits (remote) |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
for n in $SERVERS; do
	for rep in $(seq "$REPEAT"); do
		for r in $RUNS; do
			mode=${r%/*} provider=${r#*/}
			jq -r --arg n "$n" --arg rep "$rep" --slurpfile tree "$OUT/N$n-tree.json" '
				def us: . / 1000 * 10 | floor / 10;
				def pp(o): if o then "\(o.p50_ns|us) / \(o.p99_ns|us)" else "-" end;
				"| \($n) | \($rep) | \(.params.mode) | \(.params.provider) | \(.throughput|floor) | \(.p50_ns|us) | \(.p99_ns|us) | \(pp(.by_op.get)) | \(pp(.by_op.put)) | \(if .server_side_fraction < 0 then "-" else "\(.server_side_fraction*1000|floor/10)%" end) | \(.errors) | \($tree[0].meganodes) | \($tree[0].splits) (\($tree[0].remote)) |"' \
				"$OUT/N$n-$rep-$mode-$provider.json"
		done
	done
done
echo
if ((REPEAT > 1)); then
	echo "Medians of $REPEAT repeats:"
	echo
	echo "| servers | mode | provider | ops/s | p50 µs | p99 µs | server-side hops |"
	echo "|---|---|---|---|---|---|---|"
	for n in $SERVERS; do
		for r in $RUNS; do
			mode=${r%/*} provider=${r#*/}
			jq -rs --arg n "$n" '
				def median: sort | if length % 2 == 1 then .[length / 2 | floor] else (.[length / 2 - 1] + .[length / 2]) / 2 end;
				def m(f): [.[] | f] | median;
				"| \($n) | \(.[0].params.mode) | \(.[0].params.provider) | \(m(.throughput)|floor) | \(m(.p50_ns)/100|floor/10) | \(m(.p99_ns)/100|floor/10) | \(m(.server_side_fraction)*1000|floor/10)% |"' \
				"$OUT"/N"$n"-*-"$mode-$provider".json
		done
	done
	echo
fi
# Ratios side by side: each run against server-only over tcp of the same
# N and repeat, then the median of those ratios.
for n in $SERVERS; do
	line="$n server(s):"
	for r in $RUNS; do
		[[ $r == server/tcp ]] && continue
		mode=${r%/*} provider=${r#*/}
		ratios=()
		for rep in $(seq "$REPEAT"); do
			base=$OUT/N$n-$rep-server-tcp.json
			[[ -f $base ]] || continue
			ratios+=("$(jq -rn --slurpfile a "$OUT/N$n-$rep-$mode-$provider.json" --slurpfile b "$base" '$a[0].throughput / $b[0].throughput')")
		done
		((${#ratios[@]})) || continue
		line+=" $mode/$provider $(printf '%s\n' "${ratios[@]}" | jq -rs 'sort | (if length % 2 == 1 then .[length / 2 | floor] else (.[length / 2 - 1] + .[length / 2]) / 2 end) as $m | "\($m*100|floor/100)× (\(map(. * 100 | floor / 100) | join(", ")))"')"
	done
	echo "$line  [throughput ÷ server/tcp, median (each repeat)]"
done
echo
echo "Machine load (1-minute average) before the runs: $(for n in $SERVERS; do printf '%s server(s) %s; ' "$n" "$(jq -r .loadavg "$OUT/N$n-tree.json")"; done)(2 CPUs)"
echo "Notes: the N servers share CPU $SERVER_CPUS (and the first one's embedded etcd); more servers add no CPU on this host."
echo "Requests cross loopback TCP; shm maps the servers' region files (same host), so client-side reads spare the servers' CPU."
echo "(JSON of every run, status after loading and server logs: $OUT)"
