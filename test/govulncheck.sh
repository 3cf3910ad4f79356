#!/usr/bin/env bash
# govulncheck over this module (and the ycsb module) against the Go
# vulnerability database, offline: vuln.go.dev cannot be reached from the
# machines we build on, so the database is built from the
# golang.org/x/vulndb module (its data/osv reports, fetched from the Go
# module proxy like any module) with vulndb's own cmd/indexdb, once per
# VULNDB_VERSION, into $CELL_CACHE (default ~/.cache/cell).
#
# The standard library is checked at the Go version that runs this
# (GOTOOLCHAIN, set by the Makefile): run it through `make lint`.
set -euo pipefail
cd "$(dirname "$0")/.."

VULNDB_VERSION="${VULNDB_VERSION:-v0.0.0-20261105234957-e22db6528018}"
GOVULNCHECK_VERSION="${GOVULNCHECK_VERSION:-v1.9.0}"
CACHE="${CELL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/cell}"
DB="$CACHE/vulndb-$VULNDB_VERSION"

if [[ ! -s $DB/index/db.json ]]; then
  echo "govulncheck: building the vulnerability database $VULNDB_VERSION into $DB" >&2
  src=$(go mod download -json "golang.org/x/vulndb@$VULNDB_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [[ -d $src/data/osv ]] || { echo "govulncheck: no data/osv in golang.org/x/vulndb@$VULNDB_VERSION" >&2; exit 1; }
  tmp="$DB.tmp.$$"
  rm -rf "$tmp"
  mkdir -p "$tmp"
  go run "golang.org/x/vulndb/cmd/indexdb@$VULNDB_VERSION" -out "$tmp" -vulns "$src/data/osv"
  rm -rf "$DB"
  mv "$tmp" "$DB"
fi

echo "govulncheck $GOVULNCHECK_VERSION, database golang.org/x/vulndb@$VULNDB_VERSION, $(go version)"
go run "golang.org/x/vuln/cmd/govulncheck@$GOVULNCHECK_VERSION" -db "file://$DB" ./...
(cd ycsb && go run "golang.org/x/vuln/cmd/govulncheck@$GOVULNCHECK_VERSION" -db "file://$DB" ./...)
