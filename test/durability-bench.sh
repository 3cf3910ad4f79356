#!/usr/bin/env bash
# durability-bench.sh: what durability (replication factor 1: every region
# a one-voter raft group whose log is synced before a write is
# acknowledged) costs Cell, measured beside etcd on this host.
#
# Three parts, chosen with $PARTS:
#
# puts    For each N in $SERVERS (N, or NxR for N servers with --replicas R:
#         each region a raft group of R servers; a trailing l, as in 3x3l,
#         keeps every meganode in the first server's region with
#         --split-placement local: one region, one raft group, so that all
#         clients' writes share its batches): a cluster of N cellservers (N regions;
#         test/cluster.bash: the first embeds the region table's etcd,
#         --cores 1 each, small meganodes so that loading spreads the tree
#         over the servers) and, beside it, a separate etcd process (the
#         comparison: its own data directory on the same disk as Cell's
#         logs, fsync on as etcd always does; one such etcd cluster of M
#         members for each M in $ETCD_MEMBERS, all members on the same
#         CPUs and disk, the way Cell's replicas share them here). $KEYS keys of $VALUE_SIZE
#         bytes are stored in both. Then, $REPEAT times, each of $RUNS
#         against Cell immediately followed by the same workload, clients
#         and value size against etcd (cellctl bench --target etcd): puts
#         with 16 and 64 clients, YCSB-A, and gets (server-side and
#         adaptive over shm, to record what reads cost now that the log
#         exists). Ratios are Cell ÷ etcd within a repeat. The servers'
#         log counters (cell_wal_*) give the fsyncs per second, their mean
#         time and the puts each fsync carried (group commit).
# restart For each size in $RESTART_SIZES: one cellserver (its region
#         table in the comparison etcd, under a prefix of its own) stores
#         that many bytes of keys and $RESTART_VALUE_SIZE-byte values
#         (records of 1 KiB), with snapshots off; it is killed with
#         SIGKILL and restarted $REPEAT times (recovery from the log
#         alone), then made to snapshot everything and killed and
#         restarted $REPEAT times again (recovery from the snapshot). The
#         time is from exec to the server's 'msg="server: serving"' log
#         line, split into its steps from the server's log.
# snapshot With the same server and data, before the snapshot restarts:
#         puts of the stored keys (16 clients, $RESTART_VALUE_SIZE-byte
#         values) for $SNAP_DURATION with snapshots off, then again with
#         a snapshot every $SNAP_THRESHOLD log entries (checked every 1-2
#         s), with a time series every $SNAP_INTERVAL. Each snapshot's
#         pause (the region copy that holds writes, from the server's
#         log) and persist time (raft writing it to disk) are matched
#         with the windows of the series: the p99 put latency of windows
#         during a pause, during a persist, and clear of both.
#         With $SNAPSHOT_DIR set, the subject server (restart and
#         snapshot parts) writes its snapshots there (--snapshot-dir): a
#         directory on another disk than $TMPDIR's, or on a tmpfs to see
#         what a snapshot costs the log's puts when it shares no device.
#
# Servers and etcd are pinned to $SERVER_CPUS, cellctl to $CLIENT_CPUS.
# Data directories are under $TMPDIR (default /tmp), which must not be a
# tmpfs: fsync must reach the disk. Region files live in /dev/shm as
# always. Everything started is stopped on exit, and its data
# directories and /dev/shm files (cell-*) removed.
#
# Usage: test/durability-bench.sh     (installs etcd-server with apt-get
# if no etcd is on PATH and $ETCD is not set)
# Environment: ETCD_MEMBERS ("1"; "1 3" compares with a three-member etcd
# too), DURATION (5s), WARMUP (1s), REPEAT (3), PARTS ("puts
# restart snapshot"), SERVERS ("1 4"), KEYS (200000), VALUE_SIZE (64),
# RUNS (see below), CONNS (1), RESTART_SIZES ("64MiB 1GiB"),
# RESTART_VALUE_SIZE (998), SNAP_DURATION (3 × DURATION), SNAP_INTERVAL
# (250ms), SNAP_THRESHOLD (20000), MEGANODE_SIZE (4MiB, puts part),
# REGION_SIZE (256MiB, puts part), HUGEPAGES (auto), SERVER_CPUS (0),
# CLIENT_CPUS (1), BASE_PORT (28500), SNAPSHOT_DIR (unset: the subject's
# snapshots in its data directory), ETCD (etcd binary), BIN, OUT (a
# temp dir: every run's JSON and the server logs).
set -euo pipefail

DURATION=${DURATION:-5s}
WARMUP=${WARMUP:-1s}
REPEAT=${REPEAT:-3}
PARTS=${PARTS:-puts restart snapshot}
SERVERS=${SERVERS:-1 4}
KEYS=${KEYS:-200000}
VALUE_SIZE=${VALUE_SIZE:-64}
# WORKLOAD:MODE/PROVIDER:CLIENTS; etcd runs WORKLOAD:CLIENTS once after
# each (the same pair is not run twice in a repeat).
RUNS=${RUNS:-put:server/tcp:16 put:server/tcp:64 ycsb-a:server/tcp:16 ycsb-a:adaptive/shm:16 get:server/tcp:16 get:adaptive/shm:16}
CONNS=${CONNS:-1}
RESTART_SIZES=${RESTART_SIZES:-64MiB 1GiB}
RESTART_VALUE_SIZE=${RESTART_VALUE_SIZE:-998}
SNAP_INTERVAL=${SNAP_INTERVAL:-250ms}
SNAP_THRESHOLD=${SNAP_THRESHOLD:-20000}
BASE_PORT=${BASE_PORT:-28500}
SNAPSHOT_DIR=${SNAPSHOT_DIR:-}
ETCD_MEMBERS=${ETCD_MEMBERS:-1}
NO_SNAPSHOTS=1000000000000000 # --snapshot-threshold that never triggers

secs() { local v=${1%s}; echo "$v"; }
SNAP_DURATION=${SNAP_DURATION:-$(awk -v d="$(secs "$DURATION")" 'BEGIN {print 3 * d "s"}')}
has_part() { [[ " $PARTS " == *" $1 "* ]]; }

if [[ -z ${ETCD:-} ]]; then
	if ! command -v etcd >/dev/null; then
		echo "# installing etcd-server (apt-get)" >&2
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server >/dev/null
	fi
	ETCD=$(command -v etcd)
fi

# shellcheck source=test/cluster.bash
source "$(dirname "$0")/cluster.bash"
cluster_init durability
OUT=${OUT:-$work/out}
mkdir -p "$OUT" "$work/data"
if [[ $(stat -f -c %T "$work/data") == tmpfs ]]; then
	echo "$work is on a tmpfs: fsync would not reach a disk; set TMPDIR to a directory on disk" >&2
	exit 2
fi

subject_pid= subject_dir=
subject_snapdir=()
[[ -z $SNAPSHOT_DIR ]] || subject_snapdir=(--snapshot-dir "$SNAPSHOT_DIR")
# The comparison etcd clusters: for each size M in ETCD_MEMBERS,
# etcd_eps[M] (client endpoints, comma-separated) and etcd_pids[M] (the
# members' PIDs, space-separated). The first is also the region table of
# the restart part (etcd_cmp).
declare -A etcd_eps etcd_pids
etcd_all_pids=()
durability_cleanup() {
	subject_stop KILL
	subject_remove
	local p
	for p in "${etcd_all_pids[@]}"; do
		kill -TERM "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
	rm -rf "$work/data"/etcd*
	cluster_cleanup
}
trap durability_cleanup EXIT

# ---- the comparison etcd ------------------------------------------------

# etcd_start M INDEX: start an etcd cluster of M members (ports from
# BASE_PORT + 100 + 20 × INDEX) and wait until it is healthy.
etcd_start() {
	local m=$1 base=$((BASE_PORT + 100 + 20 * $2)) j name initial= eps= pids= deadline ep
	for j in $(seq "$m"); do
		initial+="${initial:+,}e$m-$j=http://127.0.0.1:$((base + 2 * j + 1))"
	done
	for j in $(seq "$m"); do
		name=e$m-$j ep=127.0.0.1:$((base + 2 * j))
		taskset -c "$SERVER_CPUS" "$ETCD" --name "$name" --data-dir "$work/data/etcd$m-$j" \
			--listen-client-urls "http://$ep" --advertise-client-urls "http://$ep" \
			--listen-peer-urls "http://127.0.0.1:$((base + 2 * j + 1))" --initial-advertise-peer-urls "http://127.0.0.1:$((base + 2 * j + 1))" \
			--initial-cluster "$initial" --initial-cluster-token "bench-$m" --logger zap --log-level warn 2>"$OUT/etcd$m-$j.log" &
		pids+="${pids:+ }$!" eps+="${eps:+,}$ep"
		etcd_all_pids+=("$!")
	done
	etcd_eps[$m]=$eps etcd_pids[$m]=$pids
	deadline=$((SECONDS + 30))
	for ep in ${eps//,/ }; do
		until curl -s --max-time 1 "http://$ep/health" | grep -q '"health":"true"'; do
			if ((SECONDS > deadline)); then
				echo "etcd ($m members) did not start:" >&2
				tail -n 20 "$OUT"/etcd"$m"-*.log >&2
				exit 1
			fi
			sleep 0.2
		done
	done
}

# ectl M ARGS: cellctl bench against the comparison etcd of M members.
ectl() { taskset -c "$CLIENT_CPUS" "$work/bin/cellctl" bench --target etcd --etcd-bench-endpoints "${etcd_eps[$1]}" "${@:2}"; }

# etcd_leader_pid M: the PID of the leader of the etcd cluster of M
# members (whose CPU time bench reports).
etcd_leader_pid() {
	local m=$1 j=0 p ep
	local -a ps=(${etcd_pids[$m]})
	for ep in ${etcd_eps[$m]//,/ }; do
		p=${ps[$j]} j=$((j + 1))
		if curl -s --max-time 2 "http://$ep/v3/maintenance/status" -X POST -d '{}' | jq -e '.leader == .header.member_id' >/dev/null 2>&1; then
			echo "$p"
			return
		fi
	done
	echo "${ps[0]}"
}

# ---- one cellserver that is killed and restarted (restart, snapshot) -----

# subject_start SIZE THRESHOLD INTERVAL: start the subject server of SIZE
# and wait until it serves; sets subject_t0 (exec time) and subject_from
# (its log's first line of this run).
subject_start() {
	local size=$1 port=$((BASE_PORT + 60))
	subject_from=$(($(wc -l <"$OUT/restart-$size.log") + 1))
	subject_t0=$(date +%s.%N)
	taskset -c "$SERVER_CPUS" "$work/bin/cellserver" --server-id "r-$size" --data-dir "$subject_dir" --cores 1 --hugepages "$HUGEPAGES" \
		--listen 127.0.0.1:$port --rdma-listen 127.0.0.1:$((port + 1)) --metrics-listen 127.0.0.1:$((port + 2)) --raft-listen 127.0.0.1:$((port + 3)) \
		--etcd-endpoints "$etcd_cmp" --etcd-prefix "/cellrestart-$size" --region-size "$subject_region" \
		--snapshot-threshold "$2" --snapshot-interval "$3" "${subject_snapdir[@]}" --log-level info 2>>"$OUT/restart-$size.log" &
	subject_pid=$!
	local deadline=$((SECONDS + 1200))
	until tail -n +"$subject_from" "$OUT/restart-$size.log" | grep -q 'msg="server: serving"'; do
		if ! kill -0 "$subject_pid" 2>/dev/null || ((SECONDS > deadline)); then
			echo "the cellserver of the $size restart test did not come up:" >&2
			tail -n 20 "$OUT/restart-$size.log" >&2
			exit 1
		fi
		sleep 0.02
	done
}

# subject_stop KILL|TERM: stop the subject server and remove the shared
# memory file a killed server leaves (its region file is replaced by the
# next start, removed at the end).
subject_stop() {
	[[ -n $subject_pid ]] || return 0
	kill -"$1" "$subject_pid" 2>/dev/null || true
	wait "$subject_pid" 2>/dev/null || true
	rm -f /dev/shm/cell-rdma-"$subject_pid"-*
	subject_pid=
}

# subject_remove: the subject's data directory and region files.
subject_remove() {
	local h m
	[[ -n $subject_dir ]] || return 0
	h=$(printf '%s' "$subject_dir" | sha256sum | cut -c1-16)
	[[ -z $SNAPSHOT_DIR ]] || rm -rf "$SNAPSHOT_DIR/cell-$h-snapshots"
	for m in /dev/shm $(awk '$3 == "hugetlbfs" {print $2}' /proc/mounts); do
		rm -f "$m"/cell-"$h"-*
	done
	rm -rf "$subject_dir"
	subject_dir=
}

sctl() { taskset -c "$CLIENT_CPUS" "$work/bin/cellctl" --endpoints "$etcd_cmp" --etcd-prefix "/cellrestart-$1" "${@:2}"; }

# logtime LINE: the Unix time of a server log line (time=...Z).
logtime() {
	local ts
	ts=$(sed -n 's/^time=\([^ ]*\) .*/\1/p' <<<"$1")
	if [[ -z $ts ]]; then
		echo "a log line the restart should have written is missing (see $OUT/restart-$size.log)" >&2
		exit 1
	fi
	date -d "$ts" +%s.%N
}

# since PATTERN: the first line of the subject's current run matching it.
since() { tail -n +"$subject_from" "$OUT/restart-$size.log" | grep -m1 "$1" || true; }

# restart_once SIZE CASE REP: SIGKILL the subject, start it again (no
# snapshots), record the times of the restart's steps from its log: open
# (exec to the region file made: the log opened, the old region file
# removed, the new one allocated), restore (to raft's follower state: the
# snapshot restored, then raft's scan of the log after it for
# configuration entries), election (to leader: --raft-heartbeat-timeout),
# replay (to everything committed applied: the log after the snapshot),
# register (to serving: listeners, and the region table, where a member
# registered by the killed run holds its ID until its lease expires).
restart_once() {
	local size=$1 kind=$2 rep=$3 made follower leader led serving lease restored
	subject_stop KILL
	subject_start "$size" "$NO_SNAPSHOTS" 1h
	made=$(logtime "$(since 'msg="server: region file made')")
	follower=$(logtime "$(since 'raft: entering follower state')")
	leader=$(logtime "$(since 'raft: entering leader state')")
	led=$(logtime "$(since "raft group leads and has applied everything")")
	serving=$(logtime "$(since 'msg="server: serving"')")
	lease=$serving
	[[ -n $(since 'waiting for its lease to expire') ]] && lease=$(logtime "$(since 'waiting for its lease to expire')")
	restored=$(since "region restored from a snapshot" | sed -n 's/.* took=\([^ ]*\).*/\1/p')
	jq -nc --arg size "$size" --arg kind "$kind" --argjson rep "$rep" --argjson t0 "$subject_t0" --argjson made "$made" \
		--argjson follower "$follower" --argjson leader "$leader" --argjson led "$led" --argjson serving "$serving" \
		--argjson lease "$lease" --arg restored "${restored:-}" \
		--arg applied "$(since "raft group leads" | sed -n 's/.* applied=\([0-9]*\).*/\1/p')" \
		'{size: $size, kind: $kind, rep: $rep, total: ($serving - $t0), open: ($made - $t0), restore: ($follower - $made),
		  election: ($leader - $follower), replay: ($led - $leader), register: ($serving - $led), lease_wait: ($serving - $lease),
		  restore_took: $restored, applied: ($applied | tonumber)}' >>"$OUT/restarts.jsonl"
	echo "#   $kind restart $rep: $(tail -n 1 "$OUT/restarts.jsonl" | jq -r 'def s: . * 1000 | floor / 1000;
		"\(.total | s) s: open \(.open | s), restore \(.restore | s), election \(.election | s), replay \(.replay | s), register \(.register | s) (lease wait \(.lease_wait | s))"')" >&2
}

# snapshots_done COUNT: wait until the subject's current run logged COUNT
# completed snapshots.
snapshots_done() {
	local deadline=$((SECONDS + 1200))
	until (($(tail -n +"$subject_from" "$OUT/restart-$size.log" | grep -c 'raft: snapshot complete up to') >= $1)); do
		if ((SECONDS > deadline)); then
			echo "no snapshot after 1200 s" >&2
			exit 1
		fi
		sleep 0.2
	done
}

# snapshots_settle SIZE: wait until no snapshot of the subject is in
# progress, so that every snapshot that overlapped a measured run is in
# its log: raft checks the threshold every 1-2 s, a put waits out a
# region copy in progress, then the last snapshot taken must be persisted.
snapshots_settle() {
	local taken deadline=$((SECONDS + 1200))
	sleep 2.5
	sctl "$1" put durability-bench/probe x >/dev/null
	taken=$(tail -n +"$subject_from" "$OUT/restart-$1.log" | grep -c 'msg="server: region snapshot taken"' || true)
	snapshots_done "$taken"
}

# bytes SIZE: a size with a KiB/MiB/GiB suffix in bytes.
bytes() { numfmt --from=iec-i "${1%B}"; }

# snapshot_spans LOG FROM: JSON lines of the snapshots the log records
# from line FROM on: start (raft asks for it), the pause (the start of the
# region's capture, which holds writes), its image's size, and the end of
# persisting it, in Unix seconds.
snapshot_spans() {
	tail -n +"$2" "$1" | awk '
		function t(line,   s) { s = line; sub(/^time=/, "", s); sub(/ .*/, "", s); return s }
		function dur(d,   v) { # a Go duration in seconds
			if (d ~ /ms$/) { sub(/ms$/, "", d); return d / 1e3 }
			if (d ~ /µs$/ || d ~ /us$/) { sub(/(µs|us)$/, "", d); return d / 1e6 }
			if (d ~ /ns$/) { sub(/ns$/, "", d); return d / 1e9 }
			if (d ~ /m[0-9.]+s$/) { split(d, a, "m"); sub(/s$/, "", a[2]); return a[1] * 60 + a[2] }
			sub(/s$/, "", d); return d + 0 }
		/raft: starting snapshot up to/ { start = t($0) }
		/msg="server: region snapshot taken"/ { taken = t($0); p = $0; sub(/.* pause=/, "", p); sub(/ .*/, "", p); pause = dur(p) }
		/msg="server: region snapshot written"/ { b = $0; sub(/.* bytes=/, "", b); sub(/ .*/, "", b); bytes = b }
		/raft: snapshot complete up to/ && taken != "" { printf "{\"start\":\"%s\",\"taken\":\"%s\",\"pause\":%s,\"bytes\":%s,\"done\":\"%s\"}\n", start, taken, pause, bytes, t($0); taken = "" }
	' | while read -r line; do
		jq -c '.start |= (sub("Z$"; "") | split(".") | (.[0] + "Z" | fromdateiso8601) + ("0." + .[1] | tonumber))
			| .taken |= (sub("Z$"; "") | split(".") | (.[0] + "Z" | fromdateiso8601) + ("0." + .[1] | tonumber))
			| .done |= (sub("Z$"; "") | split(".") | (.[0] + "Z" | fromdateiso8601) + ("0." + .[1] | tonumber))' <<<"$line"
	done
}

# wal_counters: the cluster's log counters (summed over the servers) now,
# as JSON: fsyncs and their seconds, synced commits and their seconds.
wal_counters() {
	local m
	for m in "${cluster_metrics[@]}"; do
		curl -s --max-time 5 "http://$m/metrics"
	done | awk -v at="$(date +%s.%N)" '
		$1 == "cell_wal_syncs_total" { syncs += $2 } $1 == "cell_wal_sync_seconds_total" { sync_s += $2 }
		$1 == "cell_wal_commits_total" { commits += $2 } $1 == "cell_wal_commit_seconds_total" { commit_s += $2 }
		END { printf "{\"at\":%s,\"syncs\":%.0f,\"sync_s\":%.9f,\"commits\":%.0f,\"commit_s\":%.9f}\n", at, syncs, sync_s, commits, commit_s }'
}

# ---- part 1: puts, YCSB-A and gets against etcd --------------------------

SERVER_FLAGS0=$SERVER_FLAGS

# wait_replicated waits until every region of the cluster has rf voting
# replicas and none catching up.
wait_replicated() {
	local rf=$1 i
	for i in $(seq 600); do
		if ctl regions -w json | jq -e --argjson rf "$rf" 'length > 0 and all(.[]; (.replicas | length) == $rf and ((.learners // []) | length) == 0)' >/dev/null; then
			return 0
		fi
		sleep 0.1
	done
	echo "regions not replicated $rf ways after 60 s" >&2
	ctl regions >&2
	return 1
}

median_jq='def median: sort | if length == 0 then null elif length % 2 == 1 then .[length / 2 | floor] else (.[length / 2 - 1] + .[length / 2]) / 2 end;'

i=0
for m in $ETCD_MEMBERS; do
	etcd_start "$m" "$i"
	i=$((i + 1))
	echo "# etcd $("$ETCD" --version | head -n 1 | awk '{print $3}'), $m member(s), serving at ${etcd_eps[$m]} (pids ${etcd_pids[$m]})" >&2
done
first_etcd=${ETCD_MEMBERS%% *}
etcd_cmp=${etcd_eps[$first_etcd]}

if has_part puts; then
	t0=$SECONDS
	for m in $ETCD_MEMBERS; do
		ectl "$m" --workload put --keys "$KEYS" --keyspace "$KEYS" --value-size "$VALUE_SIZE" --clients 16 --duration 100ms --warmup 0s \
			--no-progress -w json >"$OUT/etcd$m-load.json"
		echo "# etcd, $m member(s): $KEYS keys stored in $((SECONDS - t0)) s" >&2
	done
	for spec in $SERVERS; do
		n=${spec%x*} rf=1 place=
		n=${n%l}
		[[ $spec == *x* ]] && rf=${spec#*x} && rf=${rf%l}
		[[ $spec == *l ]] && place="--split-placement local"
		SERVER_FLAGS="$SERVER_FLAGS0 --replicas $rf $place"
		echo "# $spec server(s): starting" >&2
		cluster_start "$n" "$OUT/N$spec-logs"
		wait_replicated "$rf"
		t0=$SECONDS
		ctl bench --workload put --keys "$KEYS" --keyspace "$KEYS" --value-size "$VALUE_SIZE" --clients 16 --duration 100ms --warmup 0s \
			--no-progress -w json >"$OUT/N$spec-load.json"
		echo "# $spec server(s): $KEYS keys stored in $((SECONDS - t0)) s; meganodes per server $(cluster_meganodes)" >&2
		jq -n --arg mn "$(cluster_meganodes)" --arg load1 "$(loadavg)" '{meganodes: $mn, loadavg: $load1}' >"$OUT/N$spec-tree.json"
		cpid=()
		((n == 1)) && cpid=(--server-pid "${cluster_pids[0]}")
		for rep in $(seq "$REPEAT"); do
			done_etcd=" "
			for r in $RUNS; do
				IFS=: read -r w mp c <<<"$r"
				mode=${mp%/*} provider=${mp#*/}
				echo "# $spec server(s), repeat $rep: $w, $mode/$provider, $c clients" >&2
				wal0=$(wal_counters)
				ctl bench --workload "$w" --mode "$mode" --provider "$provider" --keys 0 --keyspace "$KEYS" --value-size "$VALUE_SIZE" \
					--clients "$c" --in-flight 1 --conns "$CONNS" --duration "$DURATION" --warmup "$WARMUP" --no-progress -w json \
					"${cpid[@]}" >"$OUT/N$spec-$rep-cell-$w-$mode-$provider-c$c.json" || echo "# (operations failed: counted in the report)" >&2
				jq -n --argjson a "$wal0" --argjson b "$(wal_counters)" \
					'{seconds: ($b.at - $a.at), syncs: ($b.syncs - $a.syncs), sync_s: ($b.sync_s - $a.sync_s), commits: ($b.commits - $a.commits),
					  commit_s: ($b.commit_s - $a.commit_s)}' >"$OUT/N$spec-$rep-cell-$w-$mode-$provider-c$c.wal.json"
				if [[ $done_etcd != *" $w:$c "* ]]; then
					for m in $ETCD_MEMBERS; do
						ectl "$m" --workload "$w" --keys 0 --keyspace "$KEYS" --value-size "$VALUE_SIZE" --clients "$c" --in-flight 1 \
							--duration "$DURATION" --warmup "$WARMUP" --server-pid "$(etcd_leader_pid "$m")" --no-progress -w json \
							>"$OUT/N$spec-$rep-etcd$m-$w-c$c.json" || echo "# (operations failed: counted in the report)" >&2
					done
					done_etcd+="$w:$c "
				fi
			done
		done
		snaps=0
		for f in "$OUT/N$spec-logs"/s*.log; do
			snaps=$((snaps + $(grep -c 'region snapshot taken' "$f" || true)))
		done
		jq --argjson snaps "$snaps" '.snapshots = $snaps' "$OUT/N$spec-tree.json" >"$OUT/N$spec-tree.json.new" && mv "$OUT/N$spec-tree.json.new" "$OUT/N$spec-tree.json"
		cluster_stop
	done
fi

# ---- parts 2 and 3: restart and snapshot pause ---------------------------

if has_part restart || has_part snapshot; then
	for size in $RESTART_SIZES; do
		sz=$(bytes "$size")
		keys=$((sz / (RESTART_VALUE_SIZE + 18)))
		# The region holds the records (1 KiB each) twice over: room for the
		# puts of the snapshot part, which write new records before freeing
		# the old ones.
		subject_region=$(((sz * 2 > 1 << 30 ? sz * 2 : 1 << 30) >> 20))MiB
		subject_dir=$work/data/r-$size
		mkdir -p "$subject_dir"
		: >"$OUT/restart-$size.log"
		echo "# restart $size: $keys keys of $RESTART_VALUE_SIZE-byte values, region $subject_region" >&2
		subject_start "$size" "$NO_SNAPSHOTS" 1h
		t0=$SECONDS
		sctl "$size" bench --workload put --keys "$keys" --keyspace "$keys" --value-size "$RESTART_VALUE_SIZE" --clients 64 \
			--duration 100ms --warmup 0s --no-progress -w json >"$OUT/restart-$size-load.json"
		load_s=$((SECONDS - t0))
		sctl "$size" status -w json >"$OUT/restart-$size-status.json"
		jq -n --arg size "$size" --argjson keys "$keys" --argjson load_s "$load_s" --arg region "$subject_region" \
			--arg wal "$(du -sh "$subject_dir/wal" | cut -f1)" \
			--argjson applied "$(curl -s "http://127.0.0.1:$((BASE_PORT + 62))/metrics" | awk '$1 == "cell_server_apply_index" {print $2}')" \
			'{size: $size, keys: $keys, load_s: $load_s, region: $region, wal: $wal, applied: $applied}' >"$OUT/restart-$size-data.json"
		echo "# restart $size: stored in $load_s s; log on disk $(jq -r .wal "$OUT/restart-$size-data.json")" >&2
		if has_part restart; then
			for rep in $(seq "$REPEAT"); do
				restart_once "$size" log "$rep"
			done
		fi
		if has_part snapshot; then
			common=(--workload put --keys 0 --keyspace "$keys" --value-size "$RESTART_VALUE_SIZE" --clients 16 --in-flight 1
				--conns "$CONNS" --mode server --duration "$SNAP_DURATION" --warmup "$WARMUP" --interval "$SNAP_INTERVAL" --no-progress -w json)
			echo "# snapshot $size: puts without snapshots" >&2
			sctl "$size" bench "${common[@]}" >"$OUT/snap-$size-off.json"
			# Snapshots on: the restart's first one (everything replayed is
			# past the last snapshot) completes before the measured run.
			subject_stop KILL
			subject_start "$size" "$SNAP_THRESHOLD" 1s
			snapshots_done 1
			from=$(wc -l <"$OUT/restart-$size.log")
			echo "# snapshot $size: puts with a snapshot every $SNAP_THRESHOLD entries" >&2
			sctl "$size" bench "${common[@]}" >"$OUT/snap-$size-on.json"
			snapshots_settle "$size"
			snapshot_spans "$OUT/restart-$size.log" "$from" >"$OUT/snap-$size-spans.jsonl"
		fi
		if has_part restart; then
			# Snapshot everything, then restart from that snapshot.
			subject_stop KILL
			subject_start "$size" 1 1s
			snapshots_done 1
			sleep 2 # raft compacts the log after the snapshot
			for rep in $(seq "$REPEAT"); do
				restart_once "$size" snapshot "$rep"
			done
		fi
		subject_stop TERM
		subject_remove
	done
fi

# ---- report --------------------------------------------------------------

echo
echo "Durability on $(nproc) CPUs, servers and etcd on CPU $SERVER_CPUS, cellctl on CPU $CLIENT_CPUS; data on $(df --output=source,fstype "$work/data" | tail -n 1 | awk '{print $1 " (" $2 ")"}');"
[[ -z $SNAPSHOT_DIR ]] || echo "the subject server's snapshots in $SNAPSHOT_DIR, on $(df --output=source,fstype "$SNAPSHOT_DIR" | tail -n 1 | awk '{print $1 " (" $2 ")"}')."
echo "etcd $("$ETCD" --version | head -n 1 | awk '{print $3}') ($ETCD_MEMBERS member(s)); $DURATION measured after $WARMUP, $REPEAT repeats; medians (min-max)."
if has_part puts; then
	echo
	echo "Puts, YCSB-A and gets: $KEYS keys, $VALUE_SIZE-byte values, 1 op in flight per client, $CONNS conn per client and server."
	echo
	echo "| servers | workload | Cell mode | clients | Cell ops/s | p50 µs | p99 µs | server CPU µs/op | Cell log: fsyncs/s, µs each, puts per fsync | etcd members | etcd ops/s | p50 µs | p99 µs | etcd leader CPU µs/op | Cell ÷ etcd |"
	echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
	for spec in $SERVERS; do
		for r in $RUNS; do
		for m in $ETCD_MEMBERS; do
			IFS=: read -r w mp c <<<"$r"
			mode=${mp%/*} provider=${mp#*/}
			cells=() etcds=() wals=()
			for rep in $(seq "$REPEAT"); do
				cells+=("$OUT/N$spec-$rep-cell-$w-$mode-$provider-c$c.json")
				wals+=("$OUT/N$spec-$rep-cell-$w-$mode-$provider-c$c.wal.json")
				etcds+=("$OUT/N$spec-$rep-etcd$m-$w-c$c.json")
			done
			jq -rn --arg n "$spec" --arg w "$w" --arg mp "$mp" --arg c "$c" --arg m "$m" \
				--slurpfile cell <(cat "${cells[@]}") --slurpfile etcd <(cat "${etcds[@]}") --slurpfile wal <(cat "${wals[@]}") "$median_jq"'
				def us: . / 1000 | . * 10 | floor / 10;
				def mr(f): [.[] | f] as $v | if ($v | map(select(. != null)) | length) == 0 then "-" else
					"\($v | median | . * 10 | floor / 10) (\($v | min | . * 10 | floor / 10)-\($v | max | . * 10 | floor / 10))" end;
				def row(f): [.[] | f] | median;
				($cell | mr(.throughput | floor)) as $ct | ($etcd | mr(.throughput | floor)) as $et |
				[range(0; $cell | length) | $cell[.].throughput / $etcd[.].throughput] as $ratio |
				[range(0; $cell | length) | $cell[.] as $r | $wal[.] as $l | select($l.syncs > 0) |
					{rate: ($l.syncs / $l.seconds), us: ($l.sync_s / $l.syncs * 1e6),
					 per: ($r.throughput * (($r.by_op.put.ops // 0) / $r.ops) / ($l.syncs / $l.seconds))}] as $log |
				(if ($log | length) == 0 or $w == "get" then "-" else
					"\($log | map(.rate) | median | floor), \($log | map(.us) | median | floor), \($log | map(.per) | median | . * 10 | floor / 10)" end) as $logs |
				"| \($n) | \($w) | \($mp) | \($c) | \($ct) | \($cell | row(.p50_ns) | us) | \($cell | row(.p99_ns) | us) | \($cell | mr(.server_cpu_us_per_op)) | \($logs) | \($m) | \($et) | \($etcd | row(.p50_ns) | us) | \($etcd | row(.p99_ns) | us) | \($etcd | mr(.server_cpu_us_per_op)) | \($ratio | median | . * 100 | floor / 100)× (\($ratio | min | . * 100 | floor / 100)-\($ratio | max | . * 100 | floor / 100)) |"'
		done
		done
	done
	echo
	for spec in $SERVERS; do
		echo "$spec server(s): meganodes per server after loading $(jq -r .meganodes "$OUT/N$spec-tree.json"), load average $(jq -r .loadavg "$OUT/N$spec-tree.json"), region snapshots taken during the runs $(jq -r .snapshots "$OUT/N$spec-tree.json"), errors $(cat "$OUT"/N"$spec"-*-cell-*.json | jq -s 'map(.errors) | add')"
	done
	echo "etcd errors: $(cat "$OUT"/N*-etcd*-*.json | jq -s 'map(.errors) | add'); Cell server CPU per op only with one server (one PID); etcd's is its leader's."
fi
if has_part restart && [[ -s $OUT/restarts.jsonl ]]; then
	echo
	echo "Restart after kill -9: seconds from exec to 'server: serving', and its steps (see restart_once):"
	echo "open = log opened, old region file removed, new one allocated; restore = snapshot restored and the log after it"
	echo "scanned by raft; election; replay = the log after the snapshot applied; register = listeners and the region"
	echo "table, of which lease wait = waiting for the killed run's membership lease to expire."
	echo
	echo "| data | keys | region | log on disk | recovery from | total s | without lease wait | open | restore | election | replay | register (lease wait) | applied index |"
	echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
	for size in $RESTART_SIZES; do
		for kind in log snapshot; do
			jq -rs --arg size "$size" --arg kind "$kind" --slurpfile d "$OUT/restart-$size-data.json" "$median_jq"'
				def s: . * 100 | floor / 100;
				def mr(f): [.[] | f] as $v | "\($v | median | s) (\($v | min | s)-\($v | max | s))";
				def m(f): [.[] | f] | median | s;
				map(select(.size == $size and .kind == $kind)) | select(length > 0) |
				"| \($size) | \($d[0].keys) | \($d[0].region) | \($d[0].wal) | \($kind) | \(mr(.total)) | \(mr(.total - .lease_wait)) | \(m(.open)) | \(m(.restore)) | \(m(.election)) | \(m(.replay)) | \(m(.register)) (\(m(.lease_wait))) | \(.[0].applied) |"' \
				"$OUT/restarts.jsonl"
		done
	done
fi
if has_part snapshot; then
	echo
	echo "Snapshot pause: puts of the stored keys, 16 clients, $RESTART_VALUE_SIZE-byte values, $SNAP_DURATION after $WARMUP, windows of $SNAP_INTERVAL;"
	echo "snapshots off, then on (one every $SNAP_THRESHOLD log entries). Each window of the run with snapshots is \"pause\" if it overlaps"
	echo "a capture's start (writes wait), \"persist\" if it overlaps raft writing the snapshot to disk, else \"clear\"; per kind the"
	echo "median (max) of the windows' p99 in µs, and how many windows (of which no put completed in)."
	echo
	echo "| data | snapshots | puts/s off / on | p99 µs off / on | max µs off / on | clear windows: p99 | pause windows: p99 | persist windows: p99 | pause ms (each) | persist s (each) | image MiB |"
	echo "|---|---|---|---|---|---|---|---|---|---|---|"
	for size in $RESTART_SIZES; do
		[[ -f $OUT/snap-$size-on.json ]] || continue
		jq -rn --arg size "$size" --slurpfile off "$OUT/snap-$size-off.json" --slurpfile on "$OUT/snap-$size-on.json" \
			--slurpfile spans <(cat "$OUT/snap-$size-spans.jsonl") "$median_jq"'
			def us: . / 1000 | floor;
			($on[0].start_unix_ns / 1e9) as $t0 |
			($t0 + $on[0].intervals[0].start_s) as $from | ($t0 + $on[0].intervals[-1].end_s) as $to |
			[$spans[] | select(.done >= $from and .taken - .pause <= $to)] as $s |
			[$on[0].intervals[] | ($t0 + .start_s) as $a | ($t0 + .end_s) as $b |
				(if any($s[]; .taken - .pause < $b and .taken > $a) then "pause"
				 elif any($s[]; .taken < $b and .done > $a) then "persist" else "clear" end) as $k |
				{kind: $k, p99: .p99_ns, ops: .ops}] as $ws |
			def kind(k): [$ws[] | select(.kind == k)] as $k | [$k[] | select(.ops > 0) | .p99] |
				if ($k | length) == 0 then "-" else "\(if length > 0 then "\(median | us) (\(max | us))" else "-" end), \($k | length) (\([$k[] | select(.ops == 0)] | length))" end;
			"| \($size) | \($s | length) | \($off[0].throughput | floor) / \($on[0].throughput | floor) | \($off[0].p99_ns | us) / \($on[0].p99_ns | us) | \($off[0].max_ns | us) / \($on[0].max_ns | us) | \(kind("clear")) | \(kind("pause")) | \(kind("persist")) | \([$s[].pause * 1000 | floor] | join(", ")) | \([$s[] | (.done - .taken) * 100 | floor / 100] | join(", ")) | \([$s[].bytes / 1048576 | floor] | unique | join(", ")) |"'
	done
	echo
	echo "Every snapshot of the subject servers (restart and snapshot parts): pause µs (writes held), then image MiB"
	for size in $RESTART_SIZES; do
		echo "  $size: pauses $(grep -h 'msg="server: region snapshot taken"' "$OUT/restart-$size.log" | awk '
			function dur(d) { if (d ~ /ms$/) { sub(/ms$/, "", d); return d * 1e3 } if (d ~ /µs$/) { sub(/µs$/, "", d); return d } if (d ~ /ns$/) { sub(/ns$/, "", d); return d / 1e3 } sub(/s$/, "", d); return d * 1e6 }
			{ p = $0; sub(/.* pause=/, "", p); sub(/ .*/, "", p); printf "%s%d", (NR > 1 ? ", " : ""), dur(p) }'); images $(grep -h 'msg="server: region snapshot written"' "$OUT/restart-$size.log" | awk '
			{ b = $0; sub(/.* bytes=/, "", b); sub(/ .*/, "", b); printf "%s%d", (NR > 1 ? ", " : ""), b / 1048576 }')"
	done
fi
echo
echo "Machine load (1-minute average) at the end: $(loadavg) on $(nproc) CPUs. JSON of every run and the server logs: $OUT"
