#!/usr/bin/env bash
# memory-compare.sh: bytes per key of a Cell server against Redis and etcd
# holding the same records, and against google/btree in a process of its
# own (BENCHMARKS.md §15; issue 42's "comparison users make").
#
# The records are the paper's workload as blink's engine benchmarks make
# it: $N random keys of 8-64 bytes and values of 8-256 bytes, uniform
# lengths, seed 42 (test/memload). For each store, $REPEAT times, in turn:
#
#   cell   one cellserver (its embedded etcd, RF 1, the default 1 GiB region
#          and 1 KiB nodes, region file in /dev/shm), loaded through the Go
#          client by 64 writers; reads the process's RSS (VmRSS, and its
#          RssAnon and RssShmem parts), the region memory in use as the
#          server reports it (cellctl meganodes: nodes in use x node size,
#          summed; plus cell_server_extent_bytes{state="in_use"} from
#          /metrics), and the region file's allocated bytes in /dev/shm
#   redis  redis-server (no persistence), SET pipelined over one
#          connection; reads INFO memory's used_memory and
#          used_memory_rss, and VmRSS
#   etcd   one etcd member (cmd/celletcd: the etcd that go.mod pins, its
#          defaults), a Put per record by 64 writers ($ETCD_BATCH > 1: puts
#          in transactions of that many, faster, but etcd then holds more
#          records in its in-memory raft log); reads its db size and db
#          size in use (Status) and VmRSS
#   gbtree a google/btree of degree 32 in memload's own process: the Go
#          heap it grew, and the process's RSS with the tree alone left
#
# Each server's RSS is also read before the load (empty), and the table
# gives bytes per key both of the whole and of the growth. Servers bind
# 127.0.0.1 only, on free ports; each is stopped before the next starts,
# and everything is stopped and removed at exit (Cell's region files in
# /dev/shm by `cellserver wipe`).
#
# Usage: test/memory-compare.sh. Installs redis-server with apt-get if it
# is missing. Environment: N (1000000), REPEAT (2), SETTLE (5: seconds
# between the load and the reading), ETCD_BATCH (1), STORES ("cell redis etcd gbtree"),
# BIN (a directory with cellserver, cellctl, celletcd and memload already
# built; default: go build them from the working tree).
set -euo pipefail

N=${N:-1000000}
REPEAT=${REPEAT:-2}
SETTLE=${SETTLE:-5}
STORES=${STORES:-cell redis etcd gbtree}

if [[ " $STORES " == *" redis "* ]] && ! command -v redis-server >/dev/null; then
	echo "# installing redis-server" >&2
	apt-get update -qq && apt-get install -y -qq redis-server >/dev/null
fi

root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d -t cell-memcmp-XXXXXX)
pid=
stop_server() {
	if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid"
		for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
		kill -KILL "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	pid=
}
cleanup() {
	stop_server
	for d in "$work"/cell-data-*; do
		[[ -d $d ]] && "$work/bin/cellserver" wipe --data-dir "$d" >/dev/null 2>&1 || true
	done
	rm -rf "$work"
}
trap cleanup EXIT

mkdir -p "$work/bin"
if [[ -n ${BIN:-} ]]; then
	cp "$BIN/cellserver" "$BIN/cellctl" "$BIN/celletcd" "$BIN/memload" "$work/bin/"
else
	echo "# building cellserver, cellctl, celletcd and memload" >&2
	(cd "$root" && go build -o "$work/bin/" ./cmd/cellserver ./cmd/cellctl ./cmd/celletcd ./test/memload)
fi

# free_ports K: K distinct free TCP ports on 127.0.0.1 (held open together
# while chosen, so that they differ).
free_ports() {
	python3 -c '
import socket, sys
ss = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in ss: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in ss))' "$1"
}
# rss PID [FIELD]: a /proc/PID/status field in bytes (default VmRSS).
rss() { awk -v f="${2:-VmRSS}:" '$1 == f { print $2 * 1024 }' "/proc/$1/status"; }
# field LINE NAME: the value of NAME=value in memload's line.
field() { tr ' ' '\n' <<<"$1" | awk -F= -v n="$2" '$1 == n { print $2 }'; }
wait_until() { # wait_until SECONDS CMD...: run CMD until it succeeds, failing if $pid dies
	local deadline=$((SECONDS + $1))
	shift
	until "$@" >/dev/null 2>&1; do
		if ((SECONDS > deadline)) || ! kill -0 "$pid" 2>/dev/null; then
			echo "server did not start:" >&2
			tail -n 30 "$log" >&2
			exit 1
		fi
		sleep 0.2
	done
}

results=$work/results # lines: round store metric bytes
: >"$results"
rec() { echo "$1 $2 $3 $4" >>"$results"; }

run_cell() {
	local round=$1 d=$work/cell-data-$1 listen rdma metrics raft etcd peer
	read -r listen rdma metrics raft etcd peer < <(free_ports 6)
	log=$work/cell-$round.log
	"$work/bin/cellserver" --data-dir "$d" --cores 1 \
		--listen 127.0.0.1:$listen --rdma-listen 127.0.0.1:$rdma --metrics-listen 127.0.0.1:$metrics --raft-listen 127.0.0.1:$raft \
		--etcd-listen 127.0.0.1:$etcd --etcd-peer-listen 127.0.0.1:$peer --log-level warn 2>"$log" &
	pid=$!
	ctl() { "$work/bin/cellctl" --endpoints "127.0.0.1:$etcd" "$@"; }
	wait_until 60 ctl status --command-timeout 1s
	sleep "$SETTLE"
	rec "$round" cell rss_empty "$(rss "$pid")"
	echo "# round $round: cell: loading $N records" >&2
	line=$("$work/bin/memload" -target cell -addr "127.0.0.1:$etcd" -n "$N")
	echo "# $line" >&2
	sleep "$SETTLE"
	rec "$round" cell rss "$(rss "$pid")"
	rec "$round" cell rss_anon "$(rss "$pid" RssAnon)"
	rec "$round" cell rss_shmem "$(rss "$pid" RssShmem)"
	local mj nodes extents files
	mj=$(ctl meganodes -w json)
	nodes=$(jq '([.meganodes[].used_nodes] | add) * .node_size' <<<"$mj")
	extents=$(curl -s "http://127.0.0.1:$metrics/metrics" | awk '/^cell_server_extent_bytes\{/ && /state="in_use"/ { print $2 + 0 }' | head -1)
	rec "$round" cell region_nodes "$nodes"
	rec "$round" cell region_extents "$(printf '%.0f' "$extents")"
	rec "$round" cell region_in_use "$(printf '%.0f' "$(awk -v a="$nodes" -v b="$extents" 'BEGIN { print a + b }')")"
	rec "$round" cell meganodes "$(jq '.meganodes | length' <<<"$mj")"
	files=$(grep -o '/dev/shm/cell-[^ ]*' "/proc/$pid/maps" | sort -u || true)
	rec "$round" cell shm_file "$( (for f in $files; do du -B1 "$f"; done) | awk '{ s += $1 } END { print s + 0 }')"
	stop_server
	"$work/bin/cellserver" wipe --data-dir "$d" >/dev/null 2>&1 || true
	rm -rf "$d"
}

run_redis() {
	local round=$1 port info
	read -r port < <(free_ports 1)
	log=$work/redis-$round.log
	mkdir -p "$work/redis-$round"
	redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --daemonize no --dir "$work/redis-$round" >"$log" 2>&1 &
	pid=$!
	wait_until 20 redis-cli -p "$port" ping
	sleep "$SETTLE"
	rec "$round" redis rss_empty "$(rss "$pid")"
	rec "$round" redis used_memory_empty "$(redis-cli -p "$port" info memory | tr -d '\r' | awk -F: '$1 == "used_memory" { print $2 }')"
	echo "# round $round: redis: loading $N records" >&2
	line=$("$work/bin/memload" -target redis -addr "127.0.0.1:$port" -n "$N")
	echo "# $line" >&2
	sleep "$SETTLE"
	info=$(redis-cli -p "$port" info memory | tr -d '\r')
	rec "$round" redis rss "$(rss "$pid")"
	rec "$round" redis used_memory "$(awk -F: '$1 == "used_memory" { print $2 }' <<<"$info")"
	rec "$round" redis used_memory_rss "$(awk -F: '$1 == "used_memory_rss" { print $2 }' <<<"$info")"
	rec "$round" redis keys "$(redis-cli -p "$port" dbsize | tr -d '\r')"
	stop_server
	rm -rf "$work/redis-$round"
}

run_etcd() {
	local round=$1 client peer
	read -r client peer < <(free_ports 2)
	log=$work/etcd-$round.log
	"$work/bin/celletcd" --name m --data-dir "$work/etcd-$round" \
		--listen-client-urls "http://127.0.0.1:$client" --advertise-client-urls "http://127.0.0.1:$client" \
		--listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
		--initial-cluster "m=http://127.0.0.1:$peer" --log-level warn >"$log" 2>&1 &
	pid=$!
	wait_until 60 curl -sf "http://127.0.0.1:$client/health"
	sleep "$SETTLE"
	rec "$round" etcd rss_empty "$(rss "$pid")"
	echo "# round $round: etcd: loading $N records" >&2
	line=$("$work/bin/memload" -target etcd -addr "127.0.0.1:$client" -n "$N" -etcd-batch "${ETCD_BATCH:-1}")
	echo "# $line" >&2
	sleep "$SETTLE"
	rec "$round" etcd rss "$(rss "$pid")"
	rec "$round" etcd db_size "$(field "$line" db_size)"
	rec "$round" etcd db_size_in_use "$(field "$line" db_size_in_use)"
	stop_server
	rm -rf "$work/etcd-$round"
}

run_gbtree() {
	local round=$1 line
	echo "# round $round: gbtree: building $N records" >&2
	line=$("$work/bin/memload" -target gbtree -n "$N")
	echo "# $line" >&2
	rec "$round" gbtree heap "$(field "$line" heap_bytes)"
	rec "$round" gbtree rss "$(field "$line" rss_bytes)"
}

for round in $(seq "$REPEAT"); do
	for s in $STORES; do
		"run_$s" "$round"
	done
done

echo
echo "$N records (keys 8-64 B, values 8-256 B, uniform lengths, seed 42), $REPEAT rounds; load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| store | figure | round | bytes | bytes per key |"
echo "|---|---|---|---:|---:|"
sort -k2,2 -k3,3 -k1,1n "$results" | while read -r round store metric bytes; do
	case $metric in
	keys | meganodes) printf '| %s | %s | %s | %s | |\n' "$store" "$metric" "$round" "$bytes" ;;
	*) awk -v s="$store" -v m="$metric" -v r="$round" -v b="$bytes" -v n="$N" 'BEGIN { printf "| %s | %s | %s | %.0f | %.1f |\n", s, m, r, b, b / n }' ;;
	esac
done
echo
# Ratios within each round (Cell's figure ÷ the other's).
echo "| round | Cell RSS ÷ Redis RSS | Cell RSS growth ÷ Redis RSS growth | Cell region in use ÷ Redis used_memory | Cell RSS ÷ etcd RSS | Cell region in use ÷ etcd db size | Cell region in use ÷ google/btree heap |"
echo "|---|---:|---:|---:|---:|---:|---:|"
for round in $(seq "$REPEAT"); do
	awk -v r="$round" '
		$1 == r { v[$2 "." $3] = $4 }
		function ratio(a, b) { return (!(a in v) || !(b in v) || v[b] == 0) ? "–" : sprintf("%.2f", v[a] / v[b]) }
		function growth(s) { return v[s ".rss"] - v[s ".rss_empty"] }
		END {
			g = (("cell.rss" in v) && ("redis.rss" in v) && growth("redis") > 0) ? sprintf("%.2f", growth("cell") / growth("redis")) : "–"
			printf "| %s | %s | %s | %s | %s | %s | %s |\n", r,
				ratio("cell.rss", "redis.rss"), g, ratio("cell.region_in_use", "redis.used_memory"),
				ratio("cell.rss", "etcd.rss"), ratio("cell.region_in_use", "etcd.db_size"), ratio("cell.region_in_use", "gbtree.heap")
		}' "$results"
done
