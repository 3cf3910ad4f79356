#!/usr/bin/env bash
# selector-bench.sh: the selector against the fixed modes on YCSB A-E, over
# shm and tcp, unpinned (issue #11: adaptive >= 0.95x the best fixed mode
# on every workload, over shm and tcp, on this 2-core machine).
#
# One cellserver (--cores 1, RF 1, its log synced), cellctl bench on the
# same host, neither pinned; $KEYS keys stored once, then for each repeat,
# workload, provider and mode (server, client, adaptive) a run of
# $DURATION after $WARMUP, with caching on, $CLIENTS clients x $IN_FLIGHT
# in flight. Modes of one workload and provider run back to back, in an
# order that rotates with the repeat, so that a disturbance hits them
# alike. Prints every run, then per workload and provider the medians,
# adaptive / best fixed of the medians, each repeat's adaptive / best fixed
# (the modes of a repeat run back to back) and the median of those: the
# paired figure, which a machine whose speed drifts between repeats
# disturbs less; and the median client plus server CPU per operation of
# adaptive over that of the best fixed mode.
#
# Usage: test/selector-bench.sh
# Environment: DURATION (5s), WARMUP (2s), KEYS (100000), CLIENTS (8),
# IN_FLIGHT (1), REPEAT (2), WORKLOADS (a b c d e), PROVIDERS (shm tcp),
# BIN (a directory with cellserver and cellctl; default: build them),
# BASE_PORT (27170), OUT (a temp dir: the JSON of every run).
set -euo pipefail

DURATION=${DURATION:-5s}
WARMUP=${WARMUP:-2s}
KEYS=${KEYS:-100000}
CLIENTS=${CLIENTS:-8}
IN_FLIGHT=${IN_FLIGHT:-1}
REPEAT=${REPEAT:-2}
WORKLOADS=${WORKLOADS:-a b c d e}
PROVIDERS=${PROVIDERS:-shm tcp}
BASE_PORT=${BASE_PORT:-27170}

root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=one-server.bash
source "$root/test/one-server.bash"
one_server_start selector
one_server_store

modes=(server client adaptive)
start=$(date -u +%FT%TZ)
load0=$(cut -d' ' -f1 /proc/loadavg)
for rep in $(seq "$REPEAT"); do
	for w in $WORKLOADS; do
		for p in $PROVIDERS; do
			for i in 0 1 2; do
				m=${modes[$(((i + rep) % 3))]}
				echo "# repeat $rep: ycsb-$w $p $m (load $(cut -d' ' -f1 /proc/loadavg))" >&2
				ctl bench --workload "ycsb-$w" --mode "$m" --provider "$p" --keys 0 --keyspace "$KEYS" \
					--clients "$CLIENTS" --in-flight "$IN_FLIGHT" --duration "$DURATION" --warmup "$WARMUP" \
					--server-pid "$server_pid" --no-progress -w json >"$OUT/$rep-$w-$p-$m.json"
			done
		done
	done
done

echo
echo "Selector against fixed modes: YCSB A-E (cellctl bench --workload ycsb-X), $KEYS keys, $CLIENTS clients x $IN_FLIGHT in flight,"
echo "$DURATION measured after $WARMUP, one cellserver --cores 1 (RF 1, log synced), unpinned; started $start, load average $load0 at the start, $(cut -d' ' -f1 /proc/loadavg) at the end; $REPEAT repeats."
echo
echo "| workload | provider | server ops/s | client ops/s | adaptive ops/s | adaptive ÷ best fixed | adaptive: server-side hops (range pages) | each repeat's ratio | median of the repeats' ratios | CPU per op: adaptive ÷ best fixed |"
echo "|---|---|---:|---:|---:|---:|---:|---|---:|---:|"
for w in $WORKLOADS; do
	for p in $PROVIDERS; do
		jq -rs --arg w "$w" --arg p "$p" '
			def median: sort | if length == 0 then null elif length % 2 == 1 then .[length / 2 | floor] else (.[length / 2 - 1] + .[length / 2]) / 2 end;
			def tp(m): [.[] | select(.params.mode == m) | .throughput] | median;
			def rep(r; m): [.[] | select(.rep == r and .params.mode == m) | .throughput][0];
			def cpu(m): [.[] | select(.params.mode == m) | .server_cpu_us_per_op + .client_cpu_us_per_op] | median;
			(tp("server")) as $s | (tp("client")) as $c | (tp("adaptive")) as $a | ([$s, $c] | max) as $best |
			(if $s >= $c then "server" else "client" end) as $bestmode |
			([.[] | select(.params.mode == "adaptive") | .server_side_fraction] | median) as $ssf |
			([.[] | select(.params.mode == "adaptive") | .selector.page_decisions | (.server + .client) as $n |
				select($n > 0) | .server / $n] | median) as $psf |
			([.[] | .rep] | unique) as $reps |
			[$reps[] as $r | rep($r; "adaptive") / ([rep($r; "server"), rep($r; "client")] | max)] as $ratios |
			"| \($w | ascii_upcase) | \($p) | \($s|floor) | \($c|floor) | \($a|floor) | **\($a / $best * 100 | floor / 100)×** | \(if $ssf < 0 then "-" else "\($ssf*1000|floor/10)%" end)\(if $psf == null then "" else " (\($psf*1000|floor/10)%)" end) | \([$ratios[] | . * 100 | floor / 100 | tostring] | join(", ")) | \($ratios | median * 100 | floor / 100)× | \(cpu("adaptive") / cpu($bestmode) * 100 | round / 100) |"' \
			<(for f in "$OUT"/*-"$w"-"$p"-*.json; do jq --arg rep "$(basename "$f" | cut -d- -f1)" '. + {rep: $rep}' "$f"; done)
	done
done
echo
echo "JSON of every run: $OUT"
