// Package sim is quorumlock's deterministic simulator: it runs real
// redlock.Clients against simulated Redis masters on testing/synctest's
// virtual clock, with every fault drawn from a seed, and checks each
// schedule's history with the test kit's checker (testkit/history).
//
// What is real: the Clients (rounds, roll-backs, late replies, re-sent
// releases, waiters' lines and hand-offs, fencing, locks of several keys,
// shared holders, semaphores' permits, an election's campaigns, Leader and
// Observe) and the library's Lua scripts, which each simulated node runs
// with gopher-lua on a store that answers as Redis does
// (TestScriptsAgreeWithRedis compares the two; TestFindsBrokenAcquireAll,
// TestFindsBrokenShared, TestFindsBrokenPermit and TestFindsSameTerm run
// broken ones, which the checker must catch). What
// is simulated: the nodes' Pools (node.Sender, as package pool's are), the
// network (latency, commands that land after their caller gave up, lost
// replies, resets, commands queued past their deadline), the nodes (pauses,
// kills and restarts with or without their data, clocks that run at their
// own rate), a client's process standing still (stall.go: what it sends
// and what reaches it wait for the stall's end) and time.
//
// A schedule replays from its seed: faults are drawn per link (client and
// node) from generators seeded from it, the Clients' own random choices
// come from seeded generators (internal/simhook), and the commands sent in
// one virtual instant are dispatched in an order of their content, not of
// the goroutines that sent them. docs/chaos.md, "Deterministic simulation",
// describes the fault model, the workloads and the figures.
//
// Most seeds play the mixed workload (workload.go); a minority play one
// aimed at what it reaches rarely (kinds.go): dozens of short waiters and
// shared holders on one key beside waiters of several keys and of a
// semaphore (crowd), readers following each other while a writer waits
// (readers), Resume of the values read raw from the nodes (raw-resume), a
// writer that gives up and asks for the key shared (gave-up, calm),
// releases owed for late yes whose sends fail unwritten (late-drop), and
// processes that stall with a key of their own in a drawn state and ask
// for it when the stall ends, which ST judges (stall, stcheck.go). The
// nodes keep lower bounds on the sets beside a key than the library's
// (bounds.go), which the crowd reaches. Each defect a build tag restores
// (internal/bugs; quorumlock_bug_stalldrop restores one of the stall's
// model, stalldrop_bug.go) has a search that must find it
// (bug_*_test.go).
//
// Run it with make test (a fixed budget of seeds), make simulate SEEDS=N,
// one workload with -sim.work NAME, and replay a seed with its trace:
//
//	cd testkit && go test ./internal/sim -run 'TestReplay$' -v -sim.seed N
package sim
