#!/usr/bin/env bash
# Long fuzz runs, one target at a time (docs/fuzzing.md, "Long runs").
#
#   test/fuzz-long.sh [pkg:FuzzTarget ...]
#
# Each target is fuzzed alone with two workers until EXECS inputs or CAP
# seconds, whichever comes first; with no arguments, every target of the
# module in package order. Each run's output goes to OUT/<pkg>-<target>.log
# and a line per target to OUT/results.tsv:
#
#   package  target  inputs  seconds  commit  result
#
# where result is "ok" (EXECS reached), "cap" (stopped at CAP, no failure),
# or "FAIL" (the failing input is in the package's testdata/fuzz/<target>/,
# to commit with the fix). Run it on a quiet machine: the rate falls by
# half or more while anything else runs, and docs/fuzzing.md records
# which kind of machine each run had.
#
# Environment: EXECS (10000000), CAP (1800 s), OUT (fuzz-long.out),
# JOBS (1) targets at a time with PARALLEL (2) workers each, GO (go),
# MINIMIZE (60s, go test's -fuzzminimizetime: how long each new
# interesting input is minimized; a target that finds one every few
# thousand inputs spends its run minimizing at the default).
# On two cores JOBS=2 PARALLEL=1 made about as many inputs a second in
# all as one target with two workers.
set -uo pipefail

EXECS=${EXECS:-10000000}
CAP=${CAP:-1800}
OUT=${OUT:-fuzz-long.out}
PARALLEL=${PARALLEL:-2}
JOBS=${JOBS:-1}
GO=${GO:-go}
MINIMIZE=${MINIMIZE:-60s}

self="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
cd "$(dirname "$0")/.."
mkdir -p "$OUT"
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
if [ -n "$(git status --porcelain 2>/dev/null)" ]; then
	commit="$commit+dirty"
fi

# targets lists pkg:FuzzTarget for every fuzz target of the module.
targets() {
	for dir in $($GO list -f '{{.Dir}}' ./...); do
		pkg=${dir#"$PWD"/}
		grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed "s|^func |$pkg:|"
	done
}

if [ $# -eq 0 ]; then
	set -- $(targets)
fi
if [ "$JOBS" -gt 1 ]; then
	printf '%s\n' "$@" | EXECS=$EXECS CAP=$CAP OUT=$OUT PARALLEL=$PARALLEL GO=$GO MINIMIZE=$MINIMIZE JOBS=1 xargs -P "$JOBS" -n 1 "$self"
	exit
fi

for t in "$@"; do
	pkg=${t%%:*}
	f=${t##*:}
	log="$OUT/${pkg//\//_}-$f.log"
	start=$(date +%s)
	timeout --signal=INT "$CAP" $GO test -timeout 0 -run '^$' -fuzz "^$f\$" \
		-fuzztime "${EXECS}x" -fuzzminimizetime "$MINIMIZE" -parallel "$PARALLEL" "./$pkg/" >"$log" 2>&1
	rc=$?
	secs=$(($(date +%s) - start))
	inputs=$(grep -o 'execs: [0-9]*' "$log" | tail -1 | awk '{print $2}')
	if [ "$rc" -eq 0 ]; then
		result=ok
	elif [ "$rc" -eq 124 ] && ! grep -q -- '--- FAIL' "$log"; then
		result=cap
	else
		result=FAIL
	fi
	printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$pkg" "$f" "${inputs:-0}" "$secs" "$commit" "$result" | tee -a "$OUT/results.tsv"
done
