#!/usr/bin/env bash
# rereplicate-bench.sh: how long self-repair takes to re-replicate a dead
# server's regions, how many bytes it moves per second, and what it costs
# the load meanwhile (issue #9).
#
# Starts $SERVERS cellservers on loopback (test/cluster.bash: the first
# embeds the region table's etcd; each leads one region) with --replicas
# $REPLICAS --dead-after $DEAD_AFTER, and snapshots every
# $SNAP_THRESHOLD log entries (checked every $SNAP_INTERVAL) so that a
# new replica installs a snapshot rather than replaying the whole log.
# Stores $KEYS keys of $VALUE_SIZE-byte values (again, up to five times,
# when a leadership change fails a write of the preload), waits until
# every region whose log passed the threshold has snapshotted, then runs a YCSB-A-like load for $DURATION: two
# cellctl bench processes side by side, one of gets and one of puts
# ($CLIENTS clients each, one operation in flight, zipfian keys over the
# stored keys), each printing its figures for every second (--interval
# 1s); two processes because a bench window does not split its latency by
# operation. $KILL_AT into the load the victim ($VICTIM; default: the
# highest-numbered server that neither embeds etcd nor is the
# coordinator) gets SIGKILL. The script polls cellctl regions -w json
# every $POLL until no region lists the victim and every region has
# $REPLICAS voters and no learner.
#
# Reported, from the servers' logs ("follower added", "now a voter",
# "replica removed from the group") and the polls:
#   - per replaced region: its host, the new server, when the learner was
#     added, promoted and the dead replica removed (seconds from the
#     kill), and the bytes moved: the size of the raft snapshot the host
#     sent the new replica (raft's "installing snapshot on: peer=... size="
#     line: the region image and its state; the log entries after the
#     snapshot, a few seconds of puts, are not counted; a region whose log
#     was never compacted is sent as log entries and counts 0);
#   - the repair: kill to first learner (the membership lease,
#     --lease-ttl 5 s, then --dead-after), first learner to last removal,
#     bytes moved and bytes/s over that span;
#   - the load in windows: before the kill, kill to the first learner
#     (the victim's own region fails over meanwhile), during the repair
#     (to the last removal + 1 s), after it: put and get throughput, the median and max of the
#     one-second windows' p99, and errors.
#
# Servers run on $SERVER_CPUS and cellctl on $CLIENT_CPUS (cluster.bash;
# both default to every CPU of this 2-CPU machine here: five servers of
# three replicas pinned to one CPU lose raft leaderships under the
# preload). Everything started is stopped on exit, with its data
# directories and region files.
#
# Usage: test/rereplicate-bench.sh
# Environment: SERVERS (5), REPLICAS (3), DEAD_AFTER (5s), KEYS (150000),
# VALUE_SIZE (998), CLIENTS (4 per process), DURATION (120s), KILL_AT
# (30s), VICTIM, POLL (0.5), SNAP_THRESHOLD (8192), SNAP_INTERVAL (5s),
# REGION_SIZE (512MiB), MEGANODE_SIZE (4MiB), HUGEPAGES (off),
# SERVER_CPUS (0-1), CLIENT_CPUS (0-1), SERVER_FLAGS (more cellserver
# flags), BASE_PORT (28700), BIN, OUT (a temp dir: the runs' JSON, the
# polls, the repair events, the server logs).
set -euo pipefail

SERVERS=${SERVERS:-5}
REPLICAS=${REPLICAS:-3}
DEAD_AFTER=${DEAD_AFTER:-5s}
KEYS=${KEYS:-150000}
# 998-byte values and 18-byte keys make 1 KiB extent records (a 1000-byte
# value takes a 2 KiB block).
VALUE_SIZE=${VALUE_SIZE:-998}
CLIENTS=${CLIENTS:-4}
DURATION=${DURATION:-120s}
KILL_AT=${KILL_AT:-30s}
VICTIM=${VICTIM:-}
POLL=${POLL:-0.5}
SNAP_THRESHOLD=${SNAP_THRESHOLD:-8192}
SNAP_INTERVAL=${SNAP_INTERVAL:-5s}
BASE_PORT=${BASE_PORT:-28700}
# Region files in /dev/shm: 15 replicas of 512 MiB would not fit the
# machine's reserved huge pages beside other work. Large regions leave
# room in the extent area (3/4 of the region) for ~1 KiB values.
HUGEPAGES=${HUGEPAGES:-off}
# Five servers with three replicas each on one CPU miss raft heartbeats
# under the preload (leaders step down): servers and cellctl share both.
SERVER_CPUS=${SERVER_CPUS:-0-1}
CLIENT_CPUS=${CLIENT_CPUS:-0-1}
REGION_SIZE=${REGION_SIZE:-512MiB}
SERVER_FLAGS="${SERVER_FLAGS:-} --replicas $REPLICAS --dead-after $DEAD_AFTER --snapshot-threshold $SNAP_THRESHOLD --snapshot-interval $SNAP_INTERVAL"

secs() { local v=${1%s}; echo "$v"; }

# shellcheck source=test/cluster.bash
source "$(dirname "$0")/cluster.bash"
cluster_init rereplicate
OUT=${OUT:-$work/out}
mkdir -p "$OUT"
logs=$OUT/logs
bench_pids=()
rr_cleanup() {
	local p
	for p in "${bench_pids[@]}"; do
		kill -TERM "$p" 2>/dev/null || true
	done
	# A killed server leaves its shared-memory registration table.
	[[ -n ${victim_pid:-} ]] && rm -f /dev/shm/cell-rdma-"$victim_pid"-*
	cluster_cleanup
}
trap rr_cleanup EXIT

# regions_json: the region table, or nothing when it cannot be read.
regions_json() { ctl regions -w json --command-timeout 2s 2>/dev/null || true; }

# repaired VICTIM: whether no region lists VICTIM and every region has
# $REPLICAS voters and no learner.
repaired() {
	regions_json | jq -e --arg v "$1" --argjson r "$REPLICAS" \
		'length > 0 and all(.[]; (.replicas | length) == $r and ((.learners // []) | length) == 0 and (.replicas | index($v) | not))' >/dev/null
}

echo "# starting $SERVERS servers: $SERVER_FLAGS" >&2
cluster_start "$SERVERS" "$logs"
deadline=$((SECONDS + 120))
until repaired none; do
	((SECONDS < deadline)) || { echo "regions not replicated $REPLICAS ways" >&2; exit 1; }
	sleep 0.5
done

echo "# storing $KEYS keys of $VALUE_SIZE bytes" >&2
t0=$SECONDS
# The preload stops at its first error (a write whose leader stepped down
# under the load fails with an unknown outcome): store everything again,
# up to five times.
for try in 1 2 3 4 5; do
	if ctl bench --workload put --keys "$KEYS" --keyspace "$KEYS" --value-size "$VALUE_SIZE" --clients 16 --in-flight 1 \
		--duration 100ms --warmup 0s --command-timeout 1m --no-progress -w json >"$OUT/load.json"; then
		break
	fi
	((try < 5)) || exit 1
	echo "# the preload failed; again" >&2
done
load_s=$((SECONDS - t0))
echo "# stored in ${load_s}s; waiting for every region's snapshot" >&2
# Every server snapshots its replicas after the load (raft checks the
# threshold every SNAP_INTERVAL): wait until each server logged a
# snapshot of each region it holds whose log passed the threshold (a
# region that stayed smaller is sent as its log), or 60 s.
deadline=$((SECONDS + 60))
regions_json >"$OUT/regions-before.json"
while :; do
	missing=0
	for ((i = 0; i < SERVERS; i++)); do
		for r in $(jq -r --arg s "s$i" --argjson th "$SNAP_THRESHOLD" \
			'.[] | select((.replicas | index($s)) and ([.replica_states[]?.applied] | max // 0) > $th) | .id' "$OUT/regions-before.json"); do
			grep -q "msg=\"server: region snapshot taken\" region=$r " "$logs/s$i.log" || missing=$((missing + 1))
		done
	done
	((missing == 0 || SECONDS > deadline)) && break
	sleep 1
done
((missing == 0)) || echo "# $missing replicas without a snapshot after 60 s: their learners replay the log" >&2
ctl status -w json >"$OUT/status-before.json"
regions_json >"$OUT/regions-before.json"

# The victim: not s0 (it holds etcd), not the coordinator.
if [[ -z $VICTIM ]]; then
	for ((i = SERVERS - 1; i > 0; i--)); do
		c=$(curl -s --max-time 5 "http://${cluster_metrics[i]}/metrics" | awk '$1 == "cell_coordinator" {print $2}')
		if [[ ${c:-0} != 1 ]]; then
			VICTIM=s$i
			break
		fi
	done
fi
vi=${VICTIM#s}
echo "# victim $VICTIM (pid ${cluster_pids[vi]}), in regions $(jq -r --arg v "$VICTIM" '[.[] | select(.replicas | index($v)) | .id] | join(",")' "$OUT/regions-before.json")" >&2

common=(--keys 0 --keyspace "$KEYS" --value-size "$VALUE_SIZE" --distribution zipfian --clients "$CLIENTS" --in-flight 1
	--mode server --duration "$DURATION" --warmup 1s --interval 1s --no-progress -w json)
ctl bench --workload put "${common[@]}" >"$OUT/put.json" 2>"$OUT/put.err" &
bench_pids+=($!)
ctl bench --workload get "${common[@]}" >"$OUT/get.json" 2>"$OUT/get.err" &
bench_pids+=($!)
load_start=$(date +%s.%N)
: >"$OUT/polls.jsonl"
poll() {
	jq -c --arg t "$(date +%s.%N)" --arg v "$VICTIM" --argjson r "$REPLICAS" '{t: ($t | tonumber),
		listing: [.[] | select((.replicas + (.learners // [])) | index($v)) | .id],
		learners: [.[] | (.learners // [])[]] | length,
		short: [.[] | select((.replicas | length) != $r) | .id]}' <<<"$(regions_json)" >>"$OUT/polls.jsonl" 2>/dev/null || true
}
kill_at=$(awk -v a="$load_start" -v k="$(secs "$KILL_AT")" 'BEGIN {printf "%.3f", a + 1 + k}') # + the 1 s warmup
while awk -v n="$(date +%s.%N)" -v k="$kill_at" 'BEGIN {exit !(n < k)}'; do
	poll
	sleep "$POLL"
done
kill_t=$(date +%s.%N)
kill -KILL "${cluster_pids[vi]}"
victim_pid=${cluster_pids[vi]}
echo "# $(date -u +%T) SIGKILL $VICTIM" >&2
done_t=
end=$(awk -v a="$load_start" -v d="$(secs "$DURATION")" 'BEGIN {printf "%.3f", a + d + 1}')
while :; do
	poll
	if [[ -z $done_t ]] && tail -n 1 "$OUT/polls.jsonl" | jq -e '(.listing | length) == 0 and .learners == 0 and (.short | length) == 0' >/dev/null; then
		done_t=$(tail -n 1 "$OUT/polls.jsonl" | jq .t)
		echo "# $(date -u +%T) repaired: no region lists $VICTIM" >&2
	fi
	now=$(date +%s.%N)
	if awk -v n="$now" -v e="$end" 'BEGIN {exit !(n > e)}'; then
		[[ -n $done_t ]] && break
		if awk -v n="$now" -v e="$end" 'BEGIN {exit !(n > e + 300)}'; then
			echo "# not repaired 300 s after the load" >&2
			break
		fi
	fi
	sleep "$POLL"
done
for p in "${bench_pids[@]}"; do wait "$p" || echo "# a bench process failed: $(cat "$OUT"/*.err)" >&2; done
bench_pids=()
ctl status -w json >"$OUT/status-after.json" 2>/dev/null || true
regions_json >"$OUT/regions-after.json"
loadavg >"$OUT/loadavg"

# ---- the repair from the servers' logs -----------------------------------

# Every line "time=... msg=... region=R ... server=S" of the repair, with
# the logging server, as JSON: {t, by, what, region, server, bytes}.
for ((i = 0; i < SERVERS; i++)); do
	awk -v by="s$i" '
		/msg="raft: installing snapshot on: / {
			t = $1; sub(/^time=/, "", t)
			p = $0; sub(/.* peer=/, "", p); sub(/ .*/, "", p)
			b = $0; sub(/.* size=/, "", b); sub(/[^0-9].*/, "", b)
			printf "{\"ts\":\"%s\",\"by\":\"%s\",\"what\":\"install\",\"region\":0,\"server\":\"%s\",\"bytes\":%s}\n", t, by, p, b
			next
		}
		/msg="server: (follower added|follower caught up|replica removed from the group|region snapshot taken|region restored from a snapshot|took the region over)/ {
			t = $1; sub(/^time=/, "", t)
			what = $0; sub(/.*msg="server: /, "", what); sub(/[;"].*/, "", what)
			r = $0; sub(/.* region=/, "", r); sub(/ .*/, "", r)
			s = ""; if ($0 ~ / server=/) { s = $0; sub(/.* server=/, "", s); sub(/ .*/, "", s) }
			b = 0; if ($0 ~ / bytes=/) { b = $0; sub(/.* bytes=/, "", b); sub(/ .*/, "", b) }
			pz = ""; if ($0 ~ / pause=/) { pz = $0; sub(/.* pause=/, "", pz); sub(/ .*/, "", pz) }
			printf "{\"ts\":\"%s\",\"by\":\"%s\",\"what\":\"%s\",\"region\":%s,\"server\":\"%s\",\"bytes\":%s,\"pause\":\"%s\"}\n", t, by, what, r, s, b, pz
		}' "$logs/s$i.log"
done | while read -r line; do
	ts=$(jq -r .ts <<<"$line")
	jq -c --argjson t "$(date -d "$ts" +%s.%N)" '. + {t: $t}' <<<"$line"
done | jq -s 'sort_by(.t)' >"$OUT/events.json"

jq -n --slurpfile ev "$OUT/events.json" --argjson kill "$kill_t" --arg victim "$VICTIM" --arg done_t "${done_t:-}" '
	$ev[0] as $e |
	[$e[] | select(.t > $kill and .what == "follower added")] as $adds |
	[$adds[] | . as $a |
		# The k-th learner a host added on a server after the kill got the
		# k-th snapshot the host sent it (raft logs the send a moment
		# before the addition returns).
		([$adds[] | select(.by == $a.by and .server == $a.server and .t < $a.t)] | length) as $k |
		([$e[] | select(.what == "install" and .by == $a.by and .server == $a.server and .t > $kill)] | .[$k]) as $snap |
		([$e[] | select(.what == "follower caught up" and .region == $a.region and .server == $a.server and .t >= $a.t)] | first) as $up |
		([$e[] | select(.what == "replica removed from the group" and .region == $a.region and .server == $victim and .t >= $a.t)] | first) as $rm |
		([$e[] | select(.what == "region restored from a snapshot" and .by == $a.server and .region == $a.region and .t >= $a.t)] | first) as $rs |
		{region: $a.region, host: $a.by, to: $a.server, added: ($a.t - $kill), restored: (if $rs then $rs.t - $kill else null end),
		 promoted: (if $up then $up.t - $kill else null end), removed: (if $rm then $rm.t - $kill else null end),
		 bytes: (if $snap then $snap.bytes else null end)}] as $moves |
	{kill: $kill, victim: $victim, moves: $moves,
	 first_added: ($moves | map(.added) | min), last_removed: ($moves | map(.removed // empty) | max),
	 last_promoted: ($moves | map(.promoted // empty) | max),
	 polled_done: (if $done_t == "" then null else ($done_t | tonumber) - $kill end),
	 bytes: ($moves | map(.bytes // 0) | add),
	 snapshots: [$e[] | select(.what == "region snapshot taken" and .t >= $kill and .t <= $kill + (($moves | map(.removed // empty) | max) // 0) + 1) |
		{by, region, at: (.t - $kill), pause}]}' >"$OUT/repair.json"

# ---- report --------------------------------------------------------------

jq -r '
	def s: . * 100 | round / 100;
	def mib: . / 1048576 * 10 | round / 10;
	"Victim \(.victim); \(.moves | length) regions re-replicated.",
	"",
	"| region | host | new replica on | learner added s | snapshot restored s | promoted s | dead replica removed s | snapshot MiB |",
	"|---|---|---|---|---|---|---|---|",
	(.moves[] | "| \(.region) | \(.host) | \(.to) | \(.added | s) | \(.restored // "-" | if type == "number" then s else . end) | \(.promoted // "-" | if type == "number" then s else . end) | \(.removed // "-" | if type == "number" then s else . end) | \(.bytes // 0 | mib) |"),
	"",
	"(seconds from the SIGKILL; snapshot MiB: the image raft sent, 0 when the region went as its log)",
	"",
	"Snapshots taken from the kill to the last removal (their copy holds the region'"'"'s writes): \([.snapshots[] | "\(.by)/r\(.region) at \(.at | s) s (pause \(.pause))"] | join(", ") | if . == "" then "none" else . end)",
	"",
	"| kill → first learner s | first learner → last removal s | kill → repaired (polled) s | bytes moved MiB | MiB/s (first learner → last removal) | MiB/s (first learner → last promotion) |",
	"|---|---|---|---|---|---|",
	"| \(.first_added | s) | \(.last_removed - .first_added | s) | \(.polled_done // "-" | if type == "number" then s else . end) | \(.bytes | mib) | \(.bytes / (.last_removed - .first_added) | mib) | \(.bytes / (.last_promoted - .first_added) | mib) |"' "$OUT/repair.json"

echo
echo "Load: gets and puts (${CLIENTS} clients each, zipfian over $KEYS keys, $VALUE_SIZE-byte values, server mode, tcp),"
echo "one-second windows classed by their end: before the kill, kill → first learner (failover; lease and --dead-after),"
echo "during the repair (first learner → last removal), after it. Per class: windows, ops/s (mean), p99 of the windows in µs: median (max), errors."
echo
echo "| op | window | windows | ops/s | p99 µs median (max) | errors |"
echo "|---|---|---|---|---|---|"
for op in put get; do
	jq -r --arg op "$op" --slurpfile rp "$OUT/repair.json" '
		($rp[0]) as $r | (.start_unix_ns / 1e9) as $t0 |
		[.intervals[] | ($t0 + .end_s) as $e |
			(if $e <= $r.kill then "before" elif $e <= $r.kill + $r.first_added then "failover"
			 elif $e <= $r.kill + $r.last_removed + 1 then "repair" else "after" end) as $k |
			{k: $k, ops: .throughput, p99: .p99_ns, errors: .errors}] as $w |
		def med: sort | if length == 0 then null elif length % 2 == 1 then .[length / 2 | floor] else (.[length / 2 - 1] + .[length / 2]) / 2 end;
		("before", "failover", "repair", "after") as $k | [$w[] | select(.k == $k)] as $c | select($c | length > 0) |
		"| \($op) | \($k) | \($c | length) | \($c | map(.ops) | add / length | floor) | \($c | map(.p99) | med / 1000 | floor) (\($c | map(.p99) | max / 1000 | floor)) | \($c | map(.errors) | add) |"' "$OUT/$op.json"
done
echo
echo "Stored $KEYS keys in ${load_s}s; regions before: $(jq -r '[.servers[] | "\(.id): \([.regions[]?.id] | join(","))"] | join("; ")' "$OUT/status-before.json" 2>/dev/null || echo ?)"
echo "Machine load (1-minute average) at the end: $(cat "$OUT/loadavg") on $(nproc) CPUs. Servers on CPU $SERVER_CPUS, cellctl on CPU $CLIENT_CPUS."
echo "JSON of the load, the polls, the repair events and the server logs: $OUT"
