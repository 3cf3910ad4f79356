#!/usr/bin/env bash
# drill-bench.sh: issue 9's failover figures on the docker-compose cluster
# (docker-compose.yml as shipped: five cellservers with --replicas 3, a
# 300 ms raft heartbeat timeout, three etcd members; set
# CELL_RAFT_HEARTBEAT_TIMEOUT=500ms for cellserver's default).
#
# For each fault in $KINDS (kill pause partition), one cellctl drill of
# $FAULTS faults of the leader of the region holding the most drill keys,
# each held $DURATION, one every $EVERY, under a YCSB-A load ($CLIENTS
# clients, $KEYS keys), run from the host. Each drill's JSON report is kept
# in $OUT; a summary line per drill gives the unavailability p50/p99/max
# over the faults and the ops/s before, during and after them, with the
# drill's verdict (lost writes, linearizability, cluster check).
#
# Needs docker, docker-compose and a Linux host that reaches the
# containers' addresses. The compose project ($PROJECT) is taken down,
# volumes and all, at the end.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
KINDS=${KINDS:-"kill pause partition"}
FAULTS=${FAULTS:-20}
DURATION=${DURATION:-4s}
EVERY=${EVERY:-12s}
CLIENTS=${CLIENTS:-8}
KEYS=${KEYS:-1000}
PROJECT=${PROJECT:-cellbench}
PORT=${PORT:-42379}
OUT=${OUT:-$(mktemp -d -t cell-drill-bench-XXXXXX)}
mkdir -p "$OUT"

export CELL_NET=${CELL_NET:-172.28.99}
export CELL_ETCD1_PORT=$PORT CELL_ETCD2_PORT= CELL_ETCD3_PORT=
for i in 1 2 3 4 5; do export "CELL_METRICS${i}_PORT="; done
compose() { docker-compose -p "$PROJECT" -f "$root/docker-compose.yml" "$@"; }

echo "# building the images and cellctl" >&2
make -C "$root" images >/dev/null
(cd "$root" && go build -o "$OUT/cellctl" ./cmd/cellctl)
# The services' logs are kept in $OUT/compose.log.
trap 'compose logs --no-color --timestamps >"$OUT/compose.log" 2>&1 || true; compose down -v --timeout 20 >/dev/null 2>&1 || true' EXIT
compose up -d >&2

for kind in $KINDS; do
	echo "# $kind: $FAULTS faults" >&2
	"$OUT/cellctl" --endpoints "127.0.0.1:$PORT" drill \
		--compose-project "$PROJECT" --compose-services cell1,cell2,cell3,cell4,cell5 \
		--fault "$kind" --target leader --faults "$FAULTS" \
		--fault-at 5s --fault-duration "$DURATION" --fault-every "$EVERY" --after 10s \
		--workload ycsb-a --clients "$CLIENTS" --keys "$KEYS" --check-timeout 5m \
		--artifacts "$OUT" --quiet -w json >"$OUT/$kind.json" || echo "# $kind: the drill failed (see $OUT/$kind.json)" >&2
	python3 - "$kind" "$OUT/$kind.json" <<'EOF'
import json, sys
kind, path = sys.argv[1], sys.argv[2]
r = json.load(open(path))
u = r.get("unavailability", {})
ms = lambda ns: "%.0f ms" % (ns / 1e6)
ph = {p["name"]: p for p in r.get("phases", [])}
ops = " ".join("%s %.0f" % (n, ph[n]["ops_per_sec"]) for n in ("before", "during", "between", "after") if n in ph)
print("%-9s faults %d  unavailable p50 %s p99 %s max %s  ops/s %s  lost %d  %s  cluster check %s" % (
    kind, len(r.get("faults", [])), ms(u.get("p50_ns", 0)), ms(u.get("p99_ns", 0)), ms(u.get("max_ns", 0)), ops,
    len(r.get("lost") or []), r.get("linearizability", {}).get("verdict", "?"),
    "ok" if r.get("cluster_checked") and not r.get("cluster_check") else r.get("cluster_check")))
EOF
done
echo "# reports in $OUT" >&2
