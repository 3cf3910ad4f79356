# Cell — build, test and measure. `make test` is what CI runs (.ci/run).

GO        ?= go
PKGS      ?= ./...
STATICCHECK_VERSION ?= v0.8.2
FUZZTIME  ?= 10s
BENCHTIME ?= 1s

.PHONY: all build test race bench lint fuzz clean

all: build test

build:
	$(GO) build $(PKGS)

# The whole suite under the race detector (every package here is concurrent
# or tested with concurrent readers), after go vet.
test:
	$(GO) vet $(PKGS)
	$(GO) test -race -count=1 -timeout 30m $(PKGS)

race: test

# Benchmarks side by side; see BENCHMARKS.md for the recorded runs.
bench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) $(PKGS)

# go vet, then staticcheck fetched from the module proxy.
lint:
	$(GO) vet $(PKGS)
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) $(PKGS)

# A short smoke run of every fuzz target, FUZZTIME each.
fuzz:
	@set -e; for pkg in $$($(GO) list $(PKGS)); do \
	  dir=$$($(GO) list -f '{{.Dir}}' $$pkg); \
	  for f in $$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $$dir/*_test.go 2>/dev/null | sed 's/func //'); do \
	    echo "fuzz $$pkg $$f"; \
	    $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; \
	done

clean:
	$(GO) clean -testcache
