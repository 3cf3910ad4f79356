#!/usr/bin/env bash
# Peak memory of /dev/shm while a cellserver started with --prefault
# restarts from a snapshot (BENCHMARKS.md §7, "Restart after kill -9").
#
#   test/restart-memory.sh CELLSERVER...
#
# For each cellserver binary given: start it (embedded etcd, a data
# directory of its own, --prefault=true, --region-size $REGION), put
# $KEYS keys of 1000 bytes for 3 s with cellctl bench, stop it with
# SIGTERM (a clean stop snapshots the region and removes its file), then
# start it again while sampling /dev/shm's used bytes every 0.5 ms until
# it serves. Prints the peak above the use before the first start, the
# seconds from exec to "server: serving" and the restore's own time.
# Environment: REGION (1GiB), KEYS (20000), CELLCTL (built from ./cmd/cellctl).
# Uses the default ports (7070-7073, etcd 2379/2380): run it alone.
set -euo pipefail
cd "$(dirname "$0")/.."
REGION=${REGION:-1GiB}
KEYS=${KEYS:-20000}
work=$(mktemp -d /tmp/cell-restart-memory.XXXXXX)
trap 'rm -rf "$work"' EXIT
CELLCTL=${CELLCTL:-}
if [ -z "$CELLCTL" ]; then
	go build -o "$work/cellctl" ./cmd/cellctl
	CELLCTL=$work/cellctl
fi

shm_used() { python3 -c 'import os; s=os.statvfs("/dev/shm"); print((s.f_blocks-s.f_bfree)*s.f_frsize)'; }

for bin in "$@"; do
	d=$(mktemp -d "$work/data.XXXX")
	start() {
		"$bin" --data-dir "$d/data" --prefault=true --region-size "$REGION" --log-level info >>"$d/log" 2>&1 &
		pid=$!
		until grep -q 'msg="server: serving"' "$d/log" 2>/dev/null; do
			kill -0 "$pid" 2>/dev/null || { echo "$bin did not start:" >&2; tail -n 20 "$d/log" >&2; exit 1; }
			sleep 0.05
		done
	}
	base=$(shm_used)
	start
	"$CELLCTL" bench --workload put --keys "$KEYS" --clients 4 --duration 3s --value-size 1000 >/dev/null
	kill -TERM "$pid"; wait "$pid" || true
	: >"$d/log"
	python3 - "$d/peak" <<'PY' &
import os, sys, time
peak, end = 0, time.time() + 60
while time.time() < end and not os.path.exists(sys.argv[1] + ".stop"):
    s = os.statvfs("/dev/shm")
    peak = max(peak, (s.f_blocks - s.f_bfree) * s.f_frsize)
    time.sleep(0.0005)
open(sys.argv[1], "w").write(str(peak))
PY
	sampler=$!
	t0=$(date +%s%N)
	start
	t1=$(date +%s%N)
	sleep 0.5
	touch "$d/peak.stop"; wait "$sampler"
	restore=$(grep -m1 'region restored from a snapshot' "$d/log" | grep -o 'took=[^ ]*' || echo "took=none")
	printf '%s: region %s, peak /dev/shm above the start %d MiB, exec to serving %d ms, restore %s\n' \
		"$bin" "$REGION" $((($(cat "$d/peak") - base) >> 20)) $(((t1 - t0) / 1000000)) "${restore#took=}"
	kill -TERM "$pid"; wait "$pid" || true
done
