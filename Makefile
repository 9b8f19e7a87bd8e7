# quorumlock: make test runs every test (unit and, where present, real-Redis
# integration) with the race detector; make lint runs gofmt, go vet and
# staticcheck.
GO ?= go
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: test lint fuzz demo bench chaos

# demo runs 5 embedded Redis servers in one process, contending workers, and
# kills and revives nodes; it needs nothing but Go.
demo:
	$(GO) run ./cmd/quorumlock demo

test:
	$(GO) test -race -count=1 -timeout 9m ./...

lint:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

# fuzz runs the drift fuzz test for FUZZTIME (default 30s).
FUZZTIME ?= 30s
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzValidity -fuzztime $(FUZZTIME) ./drift/

# bench runs the Go benchmarks of the hot paths (client-side cost per cycle,
# with and without fencing, over in-memory pools).
bench:
	$(GO) test -run '^$$' -bench . -benchmem -count 5 ./redlock/

# chaos runs the mixed chaos scenario (TestChaosMixed: 16 clients, node kills,
# pauses, partitions, resets, latency) for CHAOS_DURATION (default 10m),
# printing progress every few seconds, then checks the whole history for
# S1-S5, L1, L2 and linearizability (docs/chaos.md).
CHAOS_DURATION ?= 10m
chaos:
	QUORUMLOCK_CHAOS_DURATION=$(CHAOS_DURATION) $(GO) test -race -count=1 -v -timeout 0 -run '^TestChaosMixed$$' ./integration/
