#!/usr/bin/env bash
# ycsb.sh: YCSB workloads A-F through go-ycsb (ycsb/cmd/cell-ycsb) against
# Cell, etcd and Redis on this machine, with the durability of each store
# stated, and the results as Markdown tables and PNG plots.
#
# Stores ($STORES, in this order in the tables):
#
#   cell-rf1      one cellserver (embedded etcd for the region table), RF 1:
#                 every write synced to the region's raft log before it is
#                 acknowledged (test/cluster.bash, --cores 1).
#   cell-rf1-tcp  the same, the client's one-sided reads over tcp instead
#                 of $CELL_PROVIDER (auto: shm, mapping the server's region
#                 files, which only a client on the server's host can);
#                 cell-rf3-tcp likewise (not run by default).
#   cell-rf3      three cellservers, --replicas 3 (the README's "Many
#                 servers"): every write on the logs of two of the three
#                 servers, each synced, before it is acknowledged.
#   etcd          Debian's etcd-server, one member, its WAL fsynced before a
#                 write is acknowledged (etcd always does).
#   redis-aof     redis-server with appendonly yes, appendfsync everysec (a
#                 write may be lost for up to a second after a crash).
#   redis-default redis-server with its defaults (RDB snapshots only,
#                 appendonly no: a crash loses the writes since the last
#                 snapshot).
#
# Each store is started alone, $RECORDS records are loaded into it
# (cell-ycsb load, $THREADS threads), then workloads A, B, C, F, D and E
# (ycsb/workloads; YCSB's recommended order, except that YCSB reloads
# before E and this script does not: E also finds D's inserts) run $OPS
# operations each with $THREADS threads, and the store is stopped and its
# data removed. Stores are interleaved: each repeat runs every store in
# turn, in the reverse order of the previous repeat, $REPEAT times.
# Stores are pinned to $SERVER_CPUS, cell-ycsb to $CLIENT_CPUS.
#
# Output ($OUT, default a temp dir, kept): raw/ (every cell-ycsb output,
# go-ycsb's JSON measurements, and each run's latency spectra), logs/,
# loadavg.tsv (the 1-minute load average before each run), table.md; the
# PNG plots and results.md (header, tables, plots) go to $DOCS
# (docs/ycsb). Everything started is stopped on exit, and its data
# directories and /dev/shm/cell-* files removed.
#
# Usage: test/ycsb.sh         (installs etcd-server and redis-server with
# apt-get if they are missing)
# Quick run: RECORDS=20000 OPS=20000 REPEAT=1 test/ycsb.sh
# Environment: RECORDS (100000), OPS (100000), THREADS (16), REPEAT (2),
# STORES (see above), CELL_MODE (adaptive), CELL_PROVIDER (auto),
# SERVER_CPUS (0), CLIENT_CPUS (1), BASE_PORT (29100), OUT, DOCS
# (docs/ycsb; empty: no plots), WORKLOADS ("a b c f d e"), HUGEPAGES,
# MEGANODE_SIZE (4MiB), REGION_SIZE (256MiB).
set -euo pipefail

RECORDS=${RECORDS:-100000}
OPS=${OPS:-100000}
THREADS=${THREADS:-16}
REPEAT=${REPEAT:-2}
STORES=${STORES:-cell-rf1 cell-rf1-tcp cell-rf3 etcd redis-aof redis-default}
WORKLOADS=${WORKLOADS:-a b c f d e}
CELL_MODE=${CELL_MODE:-adaptive}
CELL_PROVIDER=${CELL_PROVIDER:-auto}
BASE_PORT=${BASE_PORT:-29100}

for tool in etcd:etcd-server redis-server:redis-server; do
	if ! command -v "${tool%%:*}" >/dev/null; then
		echo "# installing ${tool#*:} (apt-get)" >&2
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${tool#*:}" >/dev/null
	fi
done

# shellcheck source=test/cluster.bash
source "$(dirname "$0")/cluster.bash"
cluster_init ycsb
DOCS=${DOCS-$root/docs/ycsb}
OUT=${OUT:-$work/out}
mkdir -p "$OUT/raw" "$OUT/logs" "$work/data"
if [[ $(stat -f -c %T "$work/data") == tmpfs ]]; then
	echo "$work is on a tmpfs: fsync would not reach a disk; set TMPDIR to a directory on disk" >&2
	exit 2
fi
echo "# building cell-ycsb and ycsb-plot" >&2
(cd "$root/ycsb" && go build -o "$work/bin/" ./cmd/cell-ycsb ./cmd/ycsb-plot)

# ---- stores other than Cell: one process at a time ----------------------
other_pid=
other_stop() {
	if [[ -n $other_pid ]]; then
		kill -TERM "$other_pid" 2>/dev/null || true
		wait "$other_pid" 2>/dev/null || true
		other_pid=
	fi
	rm -rf "$work/data/etcd" "$work/data/redis"
}
ycsb_cleanup() {
	other_stop
	cluster_cleanup
}
trap ycsb_cleanup EXIT

# wait_ready NAME CMD...: until CMD succeeds, while the store runs.
wait_ready() {
	local name=$1 deadline=$((SECONDS + 60))
	shift
	until "$@" >/dev/null 2>&1; do
		if ! kill -0 "$other_pid" 2>/dev/null || ((SECONDS > deadline)); then
			echo "$name did not start:" >&2
			tail -n 20 "$OUT/logs/$name.log" >&2
			exit 1
		fi
		sleep 0.2
	done
}

etcd_addr=127.0.0.1:$((BASE_PORT + 50))
etcd_start() {
	local peer=http://127.0.0.1:$((BASE_PORT + 51))
	taskset -c "$SERVER_CPUS" etcd --name bench --data-dir "$work/data/etcd" \
		--listen-client-urls "http://$etcd_addr" --advertise-client-urls "http://$etcd_addr" \
		--listen-peer-urls "$peer" --initial-advertise-peer-urls "$peer" --initial-cluster "bench=$peer" \
		--log-level warn 2>>"$OUT/logs/etcd.log" &
	other_pid=$!
	etcd_healthy() { curl -s --max-time 1 "http://$etcd_addr/health" | grep -q '"health":"true"'; }
	wait_ready etcd etcd_healthy
}

redis_port=$((BASE_PORT + 60))
# redis_start NAME FLAGS...: redis-server with its defaults plus FLAGS.
redis_start() {
	local name=$1
	shift
	mkdir -p "$work/data/redis"
	taskset -c "$SERVER_CPUS" redis-server --port "$redis_port" --bind 127.0.0.1 --dir "$work/data/redis" \
		--daemonize no "$@" >>"$OUT/logs/$name.log" 2>&1 &
	other_pid=$!
	wait_ready "$name" redis-cli -p "$redis_port" ping
}

# store_start STORE: start it; sets binding and props (cell-ycsb's -p
# flags for it).
store_start() {
	case $1 in
	cell-rf1 | cell-rf3 | cell-rf1-tcp | cell-rf3-tcp)
		local n=1 rf=1 provider=$CELL_PROVIDER
		[[ $1 == cell-rf3* ]] && n=3 rf=3
		[[ $1 == *-tcp ]] && provider=tcp
		SERVER_FLAGS="--replicas $rf" cluster_start "$n" "$OUT/logs/$1-r$rep"
		binding=cell
		props=(-p "cell.endpoints=$etcd" -p "cell.mode=$CELL_MODE" -p "cell.provider=$provider")
		;;
	etcd)
		etcd_start
		binding=etcd props=(-p "etcd.endpoints=$etcd_addr")
		;;
	redis-aof)
		redis_start "$1" --save "" --appendonly yes --appendfsync everysec
		binding=redis props=(-p "redis.addr=127.0.0.1:$redis_port")
		;;
	redis-default)
		redis_start "$1"
		binding=redis props=(-p "redis.addr=127.0.0.1:$redis_port")
		;;
	*)
		echo "unknown store $1 (want cell-rf1, cell-rf1-tcp, cell-rf3, cell-rf3-tcp, etcd, redis-aof or redis-default)" >&2
		exit 2
		;;
	esac
}

store_stop() {
	case $1 in
	cell-*) cluster_stop ;;
	*) other_stop ;;
	esac
}

# store_label STORE: its durability, for the tables.
store_label() {
	case $1 in
	cell-rf1) echo "1 cellserver, RF 1, raft log synced before each ack; client $CELL_MODE over $CELL_PROVIDER" ;;
	cell-rf3) echo "3 cellservers, --replicas 3, acked once on 2 of 3 synced logs; client $CELL_MODE over $CELL_PROVIDER" ;;
	cell-rf1-tcp) echo "as cell-rf1, one-sided reads over tcp (what a client on another host gets)" ;;
	cell-rf3-tcp) echo "as cell-rf3, one-sided reads over tcp" ;;
	etcd) echo "etcd $(etcd --version | awk 'NR == 1 {print $3}'), 1 member, WAL fsynced before each ack" ;;
	redis-aof) echo "redis $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/'), appendonly yes, appendfsync everysec" ;;
	redis-default) echo "redis, defaults (RDB snapshots, no AOF)" ;;
	esac
}

# total_ops FILE: go-ycsb's final TOTAL operations per second in a run
# output (outputstyle=json: the last JSON line).
total_ops() { grep '^\[{' "$1" | tail -n 1 | jq -r '.[] | select(.Operation == "TOTAL") | .OPS'; }

ycsb() { taskset -c "$CLIENT_CPUS" "$work/bin/cell-ycsb" "$@"; }

# run_store STORE REP: load, run every workload, stop.
run_store() {
	local s=$1 rep=$2 w t0 f
	echo "# repeat $rep: $s: starting, loading $RECORDS records" >&2
	store_start "$s"
	t0=$SECONDS
	ycsb load "$binding" -P "$root/ycsb/workloads/workloada" "${props[@]}" \
		-p recordcount="$RECORDS" -p outputstyle=json --threads "$THREADS" >"$OUT/raw/load-$s-r$rep.txt" 2>&1 ||
		{ echo "cell-ycsb load failed:" >&2; tail -n 20 "$OUT/raw/load-$s-r$rep.txt" >&2; exit 1; }
	echo "# repeat $rep: $s: loaded in $((SECONDS - t0)) s" >&2
	for w in $WORKLOADS; do
		f=$OUT/raw/${s}__${w^^}__r$rep
		printf '%s\t%s\t%s\t%s\n' "$rep" "$s" "${w^^}" "$(loadavg)" >>"$OUT/loadavg.tsv"
		ycsb run "$binding" -P "$root/ycsb/workloads/workload$w" "${props[@]}" \
			-p recordcount="$RECORDS" -p operationcount="$OPS" -p outputstyle=json \
			-p histogram.percentiles.export=true -p histogram.percentiles.export.filepath="${f}__" \
			--threads "$THREADS" >"$f.txt" 2>&1 || { echo "cell-ycsb run failed:" >&2; tail -n 20 "$f.txt" >&2; exit 1; }
		echo "# repeat $rep: $s: workload ${w^^}: $(total_ops "$f.txt") ops/s" >&2
	done
	store_stop "$s"
}

start_load=$(loadavg)
started=$(date -u +%Y-%m-%dT%H:%MZ)
read -ra order <<<"$STORES"
: >"$OUT/stores.tsv"
for s in "${order[@]}"; do printf '%s\t%s\n' "$s" "$(store_label "$s")" >>"$OUT/stores.tsv"; done
for ((rep = 1; rep <= REPEAT; rep++)); do
	for s in "${order[@]}"; do run_store "$s" "$rep"; done
	for ((i = 0, j = ${#order[@]} - 1; i < j; i++, j--)); do
		s=${order[i]} order[i]=${order[j]} order[j]=$s
	done
done

# ---- tables and plots ----------------------------------------------------
plot_args=(-in "$OUT/raw" -stores "$OUT/stores.tsv" -table "$OUT/table.md")
[[ -n $DOCS ]] && mkdir -p "$DOCS" && plot_args+=(-png "$DOCS")
"$work/bin/ycsb-plot" "${plot_args[@]}"
{
	echo "YCSB A-F through go-ycsb v1.0.3 (ycsb/cmd/cell-ycsb), $started, $(nproc) CPUs ($(lscpu | sed -n 's/^Model name: *//p')):"
	echo "stores on CPU $SERVER_CPUS, cell-ycsb on CPU $CLIENT_CPUS; data on $(df --output=source,fstype "$work/data" | tail -n 1 | awk '{print $1 " (" $2 ")"}')."
	echo "RECORDS=$RECORDS OPS=$OPS THREADS=$THREADS REPEAT=$REPEAT CELL_MODE=$CELL_MODE CELL_PROVIDER=$CELL_PROVIDER;"
	echo "records of one 64-byte field; each store loaded afresh per repeat, then workloads ${WORKLOADS^^} in this order, no warm-up."
	echo "Load average (1 min) at the start $start_load; before each run (repeat store workload load):"
	echo "$(awk -F'\t' '{printf "%s %s %s %s; ", $1, $2, $3, $4}' "$OUT/loadavg.tsv")"
	echo
	cat "$OUT/table.md"
} >"$OUT/results.md"
if [[ -n $DOCS ]]; then
	{
		cat "$OUT/results.md"
		echo
		echo "![throughput per workload and store](throughput.png)"
		for w in $WORKLOADS; do echo "![latency CDF, workload ${w^^}](latency-${w^^}.png)"; done
	} >"$DOCS/results.md"
fi
cat "$OUT/results.md"
echo "# raw outputs, logs and tables: $OUT" >&2
