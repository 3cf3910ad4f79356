# one-server.bash: one cellserver on loopback, unpinned, for the benchmark
# scripts that measure the client beside it (sourced by selector-bench.sh
# and cpuslots-bench.sh; fig4.sh pins its server and stands alone).
#
# one_server_start NAME makes the scratch directory $work (cell-NAME-*)
# and $OUT (default $work/out), copies cellserver and cellctl from $BIN
# (or builds them from the working tree) into $work/bin, starts the server with
# --cores 1, its embedded etcd and a 1 GiB region (RF 1, its log synced),
# its log in $OUT/cellserver.log, and waits until it answers; it sets
# server_pid and an EXIT trap (one_server_stop) that stops it and removes
# its data. ctl runs cellctl against it; one_server_store stores $KEYS
# keys (values of 64 bytes) for the runs to read.
#
# Variables read: root (the repository), OUT, BASE_PORT (the server uses
# BASE_PORT..+3, its etcd +9 and +10), BIN, KEYS, SERVER_FLAGS (more
# cellserver flags), BUILD_TAGS (go build -tags, when building).

server_pid=

one_server_stop() {
	if [[ -n $server_pid ]] && kill -0 "$server_pid" 2>/dev/null; then
		kill -TERM "$server_pid"
		for _ in $(seq 100); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.2; done
		kill -KILL "$server_pid" 2>/dev/null || true
	fi
	[[ -x $work/bin/cellserver ]] && "$work/bin/cellserver" wipe --data-dir "$work/data" >/dev/null 2>&1 || true
	rm -rf "$work/bin" "$work/data"
}

ctl() { "$work/bin/cellctl" --endpoints "127.0.0.1:$((BASE_PORT + 9))" "$@"; }

one_server_start() {
	work=$(mktemp -d -t "cell-$1-XXXXXX")
	OUT=${OUT:-$work/out}
	mkdir -p "$OUT"
	trap one_server_stop EXIT
	mkdir -p "$work/bin"
	if [[ -n ${BIN:-} ]]; then
		cp "$BIN/cellserver" "$BIN/cellctl" "$work/bin/"
	else
		echo "# building cellserver and cellctl" >&2
		(cd "$root" && go build -tags "${BUILD_TAGS:-}" -o "$work/bin/" ./cmd/cellserver ./cmd/cellctl)
	fi
	"$work/bin/cellserver" --data-dir "$work/data" --cores 1 \
		--listen 127.0.0.1:$BASE_PORT --rdma-listen 127.0.0.1:$((BASE_PORT + 1)) --metrics-listen 127.0.0.1:$((BASE_PORT + 2)) --raft-listen 127.0.0.1:$((BASE_PORT + 3)) \
		--etcd-listen 127.0.0.1:$((BASE_PORT + 9)) --etcd-peer-listen 127.0.0.1:$((BASE_PORT + 10)) \
		--region-size 1GiB --log-level warn ${SERVER_FLAGS:-} 2>"$OUT/cellserver.log" &
	server_pid=$!
	local deadline=$((SECONDS + 60))
	until ctl status --command-timeout 1s >/dev/null 2>&1; do
		if ((SECONDS > deadline)) || ! kill -0 "$server_pid" 2>/dev/null; then
			echo "cellserver did not start:" >&2
			cat "$OUT/cellserver.log" >&2
			exit 1
		fi
		sleep 0.2
	done
}

one_server_store() {
	echo "# storing $KEYS keys" >&2
	ctl bench --workload put --keys "$KEYS" --keyspace "$KEYS" --duration 100ms --warmup 0s --no-progress >/dev/null
}
