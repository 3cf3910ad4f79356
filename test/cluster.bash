# cluster.bash: start and stop a Cell cluster of several cellservers on
# loopback, for the benchmark scripts (sourced by cluster-bench.sh and
# fig8.sh; fig4.sh and redis.sh run one server and stand alone).
#
# The first server embeds etcd; the others join it with --etcd-endpoints.
# Every server gets its own ports, data directory and server ID, and runs
# pinned with taskset to $SERVER_CPUS; cellctl (the ctl function) runs
# pinned to $CLIENT_CPUS. cluster_stop (also run by the EXIT trap that
# cluster_init sets) stops every server this script started, by PID, and
# removes their data directories and region files (regions live in
# /dev/shm or hugetlbfs, outside the data directory, when HUGEPAGES is
# auto).
#
# Variables read: SERVER_CPUS (0), CLIENT_CPUS (1), BASE_PORT, HUGEPAGES
# (auto), MEGANODE_SIZE (4MiB), REGION_SIZE (256MiB), SERVER_FLAGS (extra
# cellserver flags), BIN (a directory with cellserver and cellctl already
# built; default: go build them from the working tree).
#
# Ports: server i (from 0) uses BASE_PORT+10i (RPC), +1 (one-sided
# reads), +2 (metrics); the embedded etcd BASE_PORT+8 and +9.

SERVER_CPUS=${SERVER_CPUS:-0}
CLIENT_CPUS=${CLIENT_CPUS:-1}
HUGEPAGES=${HUGEPAGES:-auto}
MEGANODE_SIZE=${MEGANODE_SIZE:-4MiB}
REGION_SIZE=${REGION_SIZE:-256MiB}
SERVER_FLAGS=${SERVER_FLAGS:-}

cluster_pids=()
cluster_dirs=()
cluster_metrics=()

# cluster_init NAME: a work directory, the binaries, the EXIT trap.
cluster_init() {
	root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
	work=$(mktemp -d -t "cell-$1-XXXXXX")
	trap cluster_cleanup EXIT
	trap 'exit 130' INT TERM
	mkdir -p "$work/bin"
	if [[ -n ${BIN:-} ]]; then
		cp "$BIN/cellserver" "$BIN/cellctl" "$work/bin/"
	else
		echo "# building cellserver and cellctl" >&2
		(cd "$root" && go build -o "$work/bin/cellserver" ./cmd/cellserver && go build -o "$work/bin/cellctl" ./cmd/cellctl)
	fi
	etcd=127.0.0.1:$((BASE_PORT + 8))
}

cluster_cleanup() {
	cluster_stop
	rm -rf "$work/bin" "$work/data"
	rmdir "$work" 2>/dev/null || true # kept when it holds the output
}

ctl() { taskset -c "$CLIENT_CPUS" "$work/bin/cellctl" --endpoints "$etcd" "$@"; }

# cluster_start N LOGDIR: start N servers and wait until all are members
# of the region table and answer.
cluster_start() {
	local n=$1 logs=$2 i port dir
	mkdir -p "$logs"
	for ((i = 0; i < n; i++)); do
		port=$((BASE_PORT + 10 * i))
		dir=$work/data/s$i
		mkdir -p "$dir"
		local extra=(--etcd-listen "$etcd" --etcd-peer-listen 127.0.0.1:$((BASE_PORT + 9)))
		((i > 0)) && extra=(--etcd-endpoints "$etcd")
		# shellcheck disable=SC2086 # SERVER_FLAGS is a list of flags
		taskset -c "$SERVER_CPUS" "$work/bin/cellserver" --server-id "s$i" --data-dir "$dir" --cores 1 --hugepages "$HUGEPAGES" \
			--listen 127.0.0.1:$port --rdma-listen 127.0.0.1:$((port + 1)) --metrics-listen 127.0.0.1:$((port + 2)) --raft-listen 127.0.0.1:$((port + 3)) \
			--region-size "$REGION_SIZE" --meganode-size "$MEGANODE_SIZE" --log-level info "${extra[@]}" $SERVER_FLAGS \
			2>"$logs/s$i.log" &
		cluster_pids+=($!)
		cluster_dirs+=("$dir")
		cluster_metrics+=(127.0.0.1:$((port + 2)))
		# The first server's etcd must be up before the others join it.
		((i == 0)) && cluster_wait 1 "$logs"
	done
	cluster_wait "$n" "$logs"
}

# cluster_wait N LOGDIR: until N servers answer status.
cluster_wait() {
	local deadline=$((SECONDS + 60)) p
	until [[ $(ctl status -w json --command-timeout 2s 2>/dev/null | jq '[.servers[] | select(.error == null)] | length' 2>/dev/null) == "$1" ]]; do
		for p in "${cluster_pids[@]}"; do
			if ! kill -0 "$p" 2>/dev/null; then
				echo "a cellserver exited:" >&2
				tail -n 20 "$2"/s*.log >&2
				exit 1
			fi
		done
		if ((SECONDS > deadline)); then
			echo "the cluster did not come up with $1 servers:" >&2
			tail -n 20 "$2"/s*.log >&2
			exit 1
		fi
		sleep 0.3
	done
}

# cluster_stop: stop the servers (later ones first, the etcd holder last),
# remove their data directories and region files.
cluster_stop() {
	local i p dir h m
	for ((i = ${#cluster_pids[@]} - 1; i >= 0; i--)); do
		p=${cluster_pids[i]}
		kill -0 "$p" 2>/dev/null && kill -TERM "$p"
	done
	for p in "${cluster_pids[@]}"; do
		for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.2; done
		kill -KILL "$p" 2>/dev/null || true
	done
	for dir in "${cluster_dirs[@]}"; do
		# Region files are named after a hash of the data directory
		# (server/datadir.go regionFileName).
		h=$(printf '%s' "$dir" | sha256sum | cut -c1-16)
		for m in /dev/shm $(awk '$3 == "hugetlbfs" {print $2}' /proc/mounts); do
			rm -f "$m"/cell-"$h"-*
		done
		rm -rf "$dir"
	done
	cluster_pids=() cluster_dirs=() cluster_metrics=()
}

# cluster_counter NAME LABELS: the sum over the servers of a counter's
# sample with exactly these labels, e.g.
# cluster_counter cell_server_meganode_splits_total '{result="done"}'.
cluster_counter() {
	local m sum=0 v
	for m in "${cluster_metrics[@]}"; do
		v=$(curl -s --max-time 5 "http://$m/metrics" | awk -v k="$1$2" '$1 == k {print $2}')
		sum=$(awk -v a="$sum" -v b="${v:-0}" 'BEGIN {printf "%.6g", a + b}')
	done
	echo "$sum"
}

# loadavg: the machine's 1-minute load average (other work shares it).
loadavg() { cut -d' ' -f1 /proc/loadavg; }

# cluster_meganodes: meganodes held by each server, "s0/s1/...", with the
# leaf-level count in parentheses when there are inner meganodes.
cluster_meganodes() {
	ctl status -w json | jq -r '[.servers[] | (.meganodes | length) as $all | ([.meganodes[] | select(.level == 0)] | length) as $leaves |
		if $all == $leaves then "\($all)" else "\($all)(\($leaves))" end] | join("/")'
}
