#!/usr/bin/env bash
# netfloor.sh: the least server CPU a request/reply costs in Go on this
# host, with Go's network poller (net) and with an event loop of our own
# (epoll), in alternated pairs (BENCHMARKS.md §5; docs/bench-history.md §21). The server runs on CPU
# $SERVER_CPU with GOMAXPROCS 1, the load generator (16 connections, one
# 40-byte request in flight on each) on CPU $CLIENT_CPU.
#
# Usage: test/netfloor.sh. Environment: PAIRS (3), DURATION (6s),
# SERVER_CPU (0), CLIENT_CPU (1), PORT (28190).
set -euo pipefail

PAIRS=${PAIRS:-3}
DURATION=${DURATION:-6s}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
PORT=${PORT:-28190}

dir=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$dir"' EXIT
(cd "$(dirname "$0")/.." && go build -o "$dir/netfloor" ./test/netfloor)

# The server reports over a window a little shorter than the load's run,
# so that its first report covers the load only.
secs=${DURATION%s}
report=$(awk -v s="$secs" 'BEGIN { printf "%.1fs", s - 0.7 }')

for pair in $(seq 1 "$PAIRS"); do
	if ((pair % 2)); then order="net epoll"; else order="epoll net"; fi
	for mode in $order; do
		taskset -c "$SERVER_CPU" "$dir/netfloor" server -mode "$mode" -addr "127.0.0.1:$PORT" -report "$report" >"$dir/server.log" 2>&1 &
		spid=$!
		sleep 0.5
		load=$(cut -d' ' -f1 /proc/loadavg)
		rate=$(taskset -c "$CLIENT_CPU" "$dir/netfloor" load -addr "127.0.0.1:$PORT" -conns 16 -duration "$DURATION" | awk '{print $(NF-1)}')
		sleep 0.5
		kill "$spid"
		wait "$spid" 2>/dev/null || true
		echo "pair $pair  $mode  load average $load  requests/s $rate  server: $(head -1 "$dir/server.log")"
	done
done
