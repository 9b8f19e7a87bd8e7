# quorumlock: make test runs every test (unit and, where present, real-Redis
# integration) with the race detector; make lint runs gofmt, go vet and
# staticcheck.
GO ?= go
# The library, the test kit (testkit/) and the integration suite
# (integration/) are three modules; modules.work lets one go command cover
# them, so that their packages' tests run in parallel.
ALL := GOWORK=$(CURDIR)/modules.work
PKGS := ./... ./testkit/... ./integration/... ./otel/...
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: test test-valkey test-go1.25 lint fuzz demo bench bench-go chaos simulate findbugs

# demo runs 5 embedded Redis servers in one process, contending workers, and
# kills and revives nodes; it needs nothing but Go.
demo:
	$(GO) run ./cmd/quorumlock demo

# test also runs the deterministic simulator without the race detector (a
# fixed budget of 3,000 schedules; under -race it plays 300), against the
# extend script from before the late-landings fix, which it must catch, and
# against each defect put back by its build tag (BUGS, package
# internal/bugs), each of which it must find from seed 1 unaided.
# Those two run beside the race run, whose longest package (the integration
# suite) mostly waits on servers and timers; their output follows it.
# The test kit runs its servers as redis-server processes here (TEST_BACKEND;
# docker for containers): 55 sets of containers cost 2.7 s each to start on
# this kind of machine, which took the integration suite from 237 s to
# 515 s. make test-valkey runs the suite in containers where Docker answers,
# so both backends run in CI.
SIM := ./testkit/internal/sim
BUGS := resumemark:ResumeMark linegrowth:LineGrowth linelapse:LineLapse latedrop:LateDrop leavelate:LeaveLate stalldrop:StallDrop heldresend:HeldResend lostresend:LostResend splitonce:SplitOnce
SIMLOG := .make-test-sim.log
TEST_BACKEND ?= process
test:
	@echo "QUORUMLOCK_REDIS_BACKEND=$(TEST_BACKEND) $(GO) test -race -count=1 -timeout 9m $(PKGS)   # beside it: the simulator without -race, then against the old extend script"
	@( $(ALL) $(GO) test -count=1 -run '^TestSimulate$$' $(SIM) && \
	  $(ALL) $(GO) test -count=1 -tags quorumlock_oldextend -run '^TestFindsTheOldExtendBug$$' -v $(SIM) && \
	  for b in $(BUGS); do tag=$${b%%:*}; $(ALL) $(GO) test -count=1 -tags quorumlock_bug_$$tag -run "^TestFindsBug$${b##*:}$$" -v $(SIM) || exit 1; done ) >$(SIMLOG) 2>&1 & sim=$$!; \
	$(ALL) QUORUMLOCK_REDIS_BACKEND=$(TEST_BACKEND) $(GO) test -race -count=1 -timeout 9m $(PKGS); race=$$?; \
	wait $$sim; simrc=$$?; cat $(SIMLOG); rm -f $(SIMLOG); \
	test $$race -eq 0 -a $$simrc -eq 0
	cd bench && GOWORK=off $(GO) vet ./...

# test-valkey runs the tests against Valkey instead of Redis: every real
# server (the test kit's containers, whose image is then built from
# valkey-server, and the white-box tests' processes) runs $(VALKEY), chosen
# by QUORUMLOCK_SERVER. Only the packages whose tests start servers (the
# others run on in-process miniredis), no race detector, and no simulator
# (TestSimulate runs no server), to keep it short. On Debian 12: apt-get
# install -t bookworm-backports valkey-server.
VALKEY ?= valkey-server
VALKEY_PKGS := ./pool/... ./internal/... ./testkit/... ./integration/...
test-valkey:
	@command -v $(VALKEY) >/dev/null || { echo "$(VALKEY) not found: apt-get install -t bookworm-backports valkey-server"; exit 1; }
	$(ALL) QUORUMLOCK_SERVER=$(VALKEY) $(GO) test -count=1 -timeout 20m -skip '^TestSimulate$$' $(VALKEY_PKGS)

# test-go1.25 runs the library module's tests (not the test modules', which
# need Go 1.26) with Go 1.25, the oldest release go.mod admits; the go
# command fetches that toolchain from the module proxy.
GO125 ?= go1.25.14
test-go1.25:
	GOTOOLCHAIN=$(GO125) GOWORK=off $(GO) test -count=1 ./...

# findbugs runs the simulator's searches for the defects that build tags put
# back (BUGS, package internal/bugs) and for the old extend script, each
# from seed 1, and prints after how many schedules each was found.
findbugs:
	$(ALL) $(GO) test -count=1 -tags quorumlock_oldextend -run '^TestFindsTheOldExtendBug$$' -v $(SIM)
	@for b in $(BUGS); do tag=$${b%%:*}; $(ALL) $(GO) test -count=1 -tags quorumlock_bug_$$tag -run "^TestFindsBug$${b##*:}$$" -v $(SIM) || exit 1; done

# simulate plays SEEDS schedules (default 100,000) from seed FIRST (default 1)
# in the deterministic simulator and prints schedules per second; a failing
# seed prints the command that replays it with its trace (docs/chaos.md).
SEEDS ?= 100000
FIRST ?= 1
simulate:
	$(ALL) $(GO) test -count=1 -timeout 0 -run '^TestSimulate$$' -v $(SIM) -sim.seeds $(SEEDS) -sim.first $(FIRST)

lint:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(ALL) $(GO) vet $(PKGS)
	$(ALL) $(GO) run $(STATICCHECK) $(PKGS)
	cd bench && GOWORK=off $(GO) vet ./...

# fuzz runs the drift fuzz test for FUZZTIME (default 30s).
FUZZTIME ?= 30s
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzValidity -fuzztime $(FUZZTIME) ./drift/

# bench runs quorumlock, redsync v4 and a plain go-redis round side by side
# against 5 redis-server processes it starts itself (bench/, a module of its
# own so that users never pull redsync), interleaved, and prints medians and
# ratios. BENCH_D is the measured time per run, BENCH_PASSES the number of
# interleaved passes; BENCH_FLAGS adds flags (e.g. -scenarios w1,w16, or
# -md ../docs/performance.md -png ../docs/performance.png to update the docs;
# -scenarios starved runs the starved-client scenario, ours vs redsync: 16
# workers while 16 busy loops run and the client is at nice 15;
# -scenarios held holds 1,000 to 100,000 auto-renewed locks, ours vs redsync,
# a child process per run, e.g. with -md ../docs/performance.md -png ../docs/held.png).
BENCH_D ?= 10s
BENCH_PASSES ?= 3
BENCH_FLAGS ?=
bench:
	cd bench && $(GO) run ./cmd/bench -d $(BENCH_D) -passes $(BENCH_PASSES) $(BENCH_FLAGS)

# bench-go runs the Go benchmarks of the hot paths (client-side cost per
# cycle, with and without fencing, over in-memory pools) for quick checks.
bench-go:
	$(GO) test -run '^$$' -bench . -benchmem -count 5 ./redlock/

# chaos runs the mixed chaos scenario (TestChaosMixed: 16 clients, node kills,
# pauses, partitions, resets, latency, late delivery; fenced locks) and then
# the same with auto-extended locks on renewal sessions (TestChaosSessions),
# each for CHAOS_DURATION (default 10m), printing progress every few seconds,
# then checks each whole history for S1-S5, L1, L2 and linearizability
# (docs/chaos.md).
CHAOS_DURATION ?= 10m
chaos:
	$(ALL) QUORUMLOCK_CHAOS_DURATION=$(CHAOS_DURATION) $(GO) test -race -count=1 -v -timeout 0 -run '^TestChaos(Mixed|Sessions)$$' ./integration/
