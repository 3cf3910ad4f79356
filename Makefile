# Cell — build, test and measure. `make test` is what CI runs (.ci/run).

GO        ?= go
# Builds, tests, lint and images run on Go 1.27.3, which the go command
# fetches from the module proxy on first use (about 76 MB): Go 1.26.8's
# standard library has vulnerabilities govulncheck finds in code Cell
# calls (net/http, crypto/tls, crypto/x509), fixed in 1.27.3. go.mod asks
# for Go 1.26, so `go run ./cmd/cellserver` with an older local Go works
# for development; `make GOTOOLCHAIN=local ...` uses the local one.
GOTOOLCHAIN ?= go1.27.3
export GOTOOLCHAIN
PKGS      ?= ./...
STATICCHECK_VERSION ?= v0.8.2
FUZZTIME  ?= 10s
BENCHTIME ?= 1s
CERTS_DIR ?= certs
CERTS_HOSTS ?= localhost,127.0.0.1,::1

IMAGE_TAG ?= dev
IMAGE_DIR ?= build/images
DOCKER    ?= docker
VERSION   ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)

.PHONY: all build test test-short test-allocs test-ycsb test-fabric ycsb race bench lint fuzz images certs clean

all: build test

build:
	$(GO) build $(PKGS)

# The whole suite under the race detector (every package here is concurrent
# or tested with concurrent readers), after go vet. One package at a time
# (-p 1): the server, test and compose drill packages run raft groups with
# 300 ms heartbeats, and on two cores two of them at once starve each
# other's heartbeats into elections.
test:
	$(GO) vet $(PKGS)
	$(GO) test -race -count=1 -p 1 -timeout 30m $(PKGS)
	$(MAKE) test-allocs
	$(MAKE) test-ycsb

# A quick check of a checkout, about a minute once built: the engine, the
# wire protocol, one-sided reads, regions, the selector and the client
# against in-process servers; -short, without the race detector. Not what
# CI runs (make test).
test-short:
	$(GO) test -short -count=1 ./blink/ ./wire/ ./rdma/ ./meganode/ ./locality/... ./client/

# The allocation tests skip under the race detector (it changes what
# allocates): run them again without it, so that the read path's
# "allocates nothing" is checked in CI.
ALLOC_TESTS = Allocs|NoAllocations|DoesNotAllocate
test-allocs:
	$(GO) test -count=1 -run '$(ALLOC_TESTS)' ./blink/ ./wire/ ./rdma/ ./locality/ ./server/ ./client/

# The go-ycsb bindings (ycsb/, a module of its own so that go-ycsb, redis
# and gonum stay out of this one's go.mod): about 20 s; the etcd and
# redis tests skip without etcd and redis-server on PATH. Without the race
# detector: go-ycsb v1.0.3's workload generators write their last values
# from every worker unsynchronized (generator.Number.SetLastValue), which
# the detector reports in go-ycsb's code, not ours.
test-ycsb:
	cd ycsb && $(GO) vet ./... && $(GO) test -count=1 -p 1 -timeout 10m ./...

# The libfabric provider (rdma/fabric_*.go, built with -tags libfabric and
# cgo; libfabric-dev installed: .ci/run installs it): vet, the rdma
# package's suite under the race detector (the conformance suite over
# libfabric's shm and tcp;ofi_rxm, beside tcp and shm), the flags and
# output of cellserver and cellctl, and the end-to-end cluster over it
# (test/fabric_test.go: 3 servers, RF 3, one paused then killed). About 3
# minutes on 2 cores.
FABRIC_TAGS = -tags libfabric
test-fabric:
	$(GO) vet $(FABRIC_TAGS) ./rdma/ ./server/ ./client/ ./cmd/... ./test/
	$(GO) test $(FABRIC_TAGS) -race -count=1 -timeout 10m ./rdma/
	$(GO) test $(FABRIC_TAGS) -count=1 -run 'Fabric|Provider|Transport|Registry' ./cmd/cellserver/ ./cmd/cellctl/ ./regiontable/
	$(GO) test $(FABRIC_TAGS) -count=1 -timeout 10m -run 'TestFabricCluster' ./test/

# YCSB A-F through go-ycsb against Cell (RF 1, RF 3), etcd and Redis;
# tables and plots into docs/ycsb. See test/ycsb.sh for its settings
# (RECORDS, OPS, THREADS, REPEAT, ...).
ycsb:
	test/ycsb.sh

race: test

# Benchmarks side by side; see BENCHMARKS.md for the recorded runs.
bench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) $(PKGS)

# go vet, staticcheck fetched from the module proxy, and govulncheck
# against a vulnerability database built offline from golang.org/x/vulndb
# (test/govulncheck.sh), for this module and ycsb/.
lint:
	$(GO) vet $(PKGS)
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) $(PKGS)
	test/govulncheck.sh

# A short smoke run of every fuzz target, FUZZTIME each. Each package's
# instrumented test binary is built once (go test -c -fuzz) and run per
# target in the package's directory, as go test -fuzz would: new inputs go
# to the same cache ($GOCACHE/fuzz/<package>), a failing one to the
# package's testdata/fuzz/<Target>/. (go test -fuzz per target links the
# binary again each time: 7 of the 10 s a 3 s run took.)
fuzz:
	@set -e; bin=$$(mktemp -d); trap 'rm -rf "$$bin"' EXIT; \
	cache=$$($(GO) env GOCACHE)/fuzz; \
	for pkg in $$($(GO) list $(PKGS)); do \
	  dir=$$($(GO) list -f '{{.Dir}}' $$pkg); \
	  targets=$$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $$dir/*_test.go 2>/dev/null | sed 's/func //'); \
	  [ -n "$$targets" ] || continue; \
	  $(GO) test -c -fuzz . -o "$$bin/fuzz.test" $$pkg; \
	  for f in $$targets; do \
	    echo "fuzz $$pkg $$f"; \
	    (cd $$dir && "$$bin/fuzz.test" -test.paniconexit0 -test.run '^$$' -test.fuzz "^$$f$$" \
	      -test.fuzztime $(FUZZTIME) -test.fuzzcachedir "$$cache/$$pkg"); \
	  done; \
	done

# The docker-compose cluster's images, built offline: static binaries
# (CGO_ENABLED=0) staged in $(IMAGE_DIR), which is the only build context,
# and one image FROM scratch each (deploy/docker/*.Dockerfile); nothing is
# pulled. Tags cell/cellserver, cell/etcd and cell/cellctl, :$(IMAGE_TAG)
# (docker-compose.yml runs :dev).
images:
	rm -rf $(IMAGE_DIR)
	mkdir -p $(IMAGE_DIR)/bin $(IMAGE_DIR)/tmp
	CGO_ENABLED=0 $(GO) build -ldflags "-s -w -X main.version=$(VERSION)" -o $(IMAGE_DIR)/bin/ \
	  ./cmd/cellserver ./cmd/cellctl ./cmd/celletcd ./cmd/cellprobe
	$(DOCKER) build -q -f deploy/docker/etcd.Dockerfile -t cell/etcd:$(IMAGE_TAG) $(IMAGE_DIR)
	$(DOCKER) build -q -f deploy/docker/cellserver.Dockerfile -t cell/cellserver:$(IMAGE_TAG) $(IMAGE_DIR)
	$(DOCKER) build -q -f deploy/docker/cellctl.Dockerfile -t cell/cellctl:$(IMAGE_TAG) $(IMAGE_DIR)

# A development CA and server, admin and client certificates in
# $(CERTS_DIR) (docs/tls.md); refuses to overwrite an existing CA.
certs:
	$(GO) run ./cmd/cellctl certs --dir $(CERTS_DIR) --hosts $(CERTS_HOSTS)

# Development certificates for the compose cluster's TLS variant
# (docker-compose.tls.yml): a CA and server, admin and client
# certificates in $(COMPOSE_CERTS_DIR) (docker-compose.tls.yml's default
# CELL_CERTS_DIR), the server's valid for every container's name and its
# address on $(CELL_NET).0/24.
COMPOSE_CERTS_DIR ?= build/certs
CELL_NET  ?= 172.28.77
COMPOSE_HOSTS = localhost,127.0.0.1,etcd1,etcd2,etcd3,cell1,cell2,cell3,cell4,cell5,client,$(CELL_NET).11,$(CELL_NET).12,$(CELL_NET).13,$(CELL_NET).21,$(CELL_NET).22,$(CELL_NET).23,$(CELL_NET).24,$(CELL_NET).25,$(CELL_NET).30
compose-certs:
	$(GO) run ./cmd/cellctl certs --dir $(COMPOSE_CERTS_DIR) --hosts $(COMPOSE_HOSTS)

clean:
	$(GO) clean -testcache
	rm -rf $(IMAGE_DIR)
