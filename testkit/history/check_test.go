package history

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/drift"
)

const (
	ttl   = time.Second
	nodes = 5
)

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

var allow = drift.Allowance(ttl, drift.DefaultFactor)

var cfg = Config{Nodes: nodes, NodeTimeout: ms(50), Fencing: true, Replies: true}

// builder writes hand-made histories: times in ms on the History's clock.
type builder struct {
	h *History
}

func newBuilder() *builder { return &builder{h: New()} }

// acquire records a successful acquire of key by who, called at start,
// whose winning round started at round and which returned at ret, with
// yes-replies from the given nodes (SET and write-back).
func (b *builder) acquire(who, key, tok string, fence uint64, start, round, ret int, yes ...int) {
	if yes == nil {
		yes = []int{0, 1, 2}
	}
	for _, n := range yes {
		b.h.AddReply(Reply{Client: who, Node: n, Kind: ReplyAcquire, Key: key, Token: tok, Start: ms(round), End: ms(ret - 1)})
		b.h.AddReply(Reply{Client: who, Node: n, Kind: ReplyRaise, Key: key, Token: tok, Start: ms(ret - 1), End: ms(ret)})
	}
	b.h.Add(Op{Client: who, Key: key, Kind: Acquire, Start: ms(start), End: ms(ret), Outcome: OK, Token: tok, Fence: fence, TTL: ttl, Deadline: ms(round) + ttl - allow})
}

func (b *builder) failed(who, key string, start, end int, tried ...string) {
	b.h.Add(Op{Client: who, Key: key, Kind: Acquire, Start: ms(start), End: ms(end), Outcome: Failed, TTL: ttl, Tried: tried, Quorum: 3, Agreed: 1})
}

func (b *builder) extend(who, key, tok string, start, end int) {
	for _, n := range []int{0, 1, 2} {
		b.h.AddReply(Reply{Client: who, Node: n, Kind: ReplyExtend, Key: key, Token: tok, Start: ms(start), End: ms(end)})
	}
	b.h.Add(Op{Client: who, Key: key, Kind: Extend, Start: ms(start), End: ms(end), Outcome: OK, Token: tok, TTL: ttl, Deadline: ms(start) + ttl - allow})
}

func (b *builder) release(who, key, tok string, start, end int) {
	b.h.Add(Op{Client: who, Key: key, Kind: Release, Start: ms(start), End: ms(end), Outcome: OK, Token: tok})
}

func (b *builder) section(who, key, tok string, fence uint64, start, end int, read int64) {
	b.h.AddSection(Section{Client: who, Key: key, Token: tok, Fence: fence, Start: ms(start), End: ms(end), Counted: true, Read: read, Wrote: true, Fenced: Accepted})
}

// clean is a history that satisfies every property: three holders of "k"
// one after the other (the second retried while the first held it), one of
// "j" who died, a failed attempt that left nothing, and a final scan.
func clean() *builder {
	b := newBuilder()
	b.acquire("a", "k", "ta", 1, 0, 0, 5)
	b.section("a", "k", "ta", 1, 6, 8, 0)
	b.extend("a", "k", "ta", 9, 12)
	b.section("a", "k", "ta", 1, 13, 15, 1)
	b.release("a", "k", "ta", 16, 18)
	// b's Lock call began while a held the lock; its winning round
	// started as a released.
	b.acquire("b", "k", "tb", 2, 3, 15, 19, 2, 3, 4)
	b.section("b", "k", "tb", 2, 20, 22, 2)
	b.release("b", "k", "tb", 23, 24)
	b.failed("c", "k", 21, 23, "tc-1")
	b.acquire("c", "k", "tc", 3, 30, 30, 31)
	b.section("c", "k", "tc", 3, 32, 33, 3)
	b.release("c", "k", "tc", 34, 35)
	b.h.SetCounter("k", 4)

	// d acquires j and dies; the nodes forget it in time.
	b.acquire("d", "j", "td", 7, 40, 40, 42)
	b.h.Add(Op{Client: "d", Key: "j", Kind: Abandon, Start: ms(50), End: ms(50)})
	b.h.AddProbe(Probe{Key: "j", Token: "td", TTL: ttl, Died: ms(50), LastTouch: ms(40), Nodes: []ProbeNode{
		{Node: 0, Reached: true, Holds: true, PTTL: 990, At: ms(51)},
		{Node: 1, Reached: true, Holds: true, PTTL: 989, At: ms(52)},
		{Node: 2, Reached: false},
		{Node: 3, Reached: true},
	}})
	// e waited for j until d's lock expired.
	b.acquire("e", "j", "te", 8, 45, 40+int((ttl+allow)/time.Millisecond), 1100)
	b.release("e", "j", "te", 1101, 1102)
	b.h.AddLeftovers(Leftover{Node: 2, Key: "quorumlock:{j}", Token: "td", PTTL: 400})
	return b
}

func check(t *testing.T, b *builder, c Config) *Report {
	t.Helper()
	r := Check(b.h, c)
	t.Logf("report:\n%s", r)
	return r
}

// want fails unless r has exactly the given numbers of violations (every
// property not named must have none).
func want(t *testing.T, r *Report, counts map[Property]int) {
	t.Helper()
	for _, p := range Properties {
		if got := r.Count(p); got != counts[p] {
			t.Errorf("%s: %d violations, want %d", p, got, counts[p])
		}
	}
}

func TestCleanHistory(t *testing.T) {
	b := clean()
	semaphores(b)
	election(b)
	lines(b)
	a := NewAudit(AuditConfig{Prefix: "quorumlock:"})
	feed(a, 0, acquireLines("quorumlock:{k}", "ta")...)
	feed(a, 0, releaseLines("quorumlock:{k}", "ta", true)...)
	c := lineCfg()
	c.Audit = a
	r := check(t, b, c)
	want(t, r, nil)
	for _, p := range Properties {
		if _, skipped := r.Skipped[p]; skipped || r.Checked[p] == 0 {
			t.Errorf("%s: checked %d cases, skipped %q: the clean history should exercise every property", p, r.Checked[p], r.Skipped[p])
		}
	}
	if r.Acquired != 5+5+2+5 || r.FailedAcquires != 1+1 || r.Abandoned != 1 || r.Sections != 4+3 || r.Permits != 5 || r.Leaders != 2 || r.Observed != 3 {
		t.Errorf("counts: %+v", r)
	}
}

func TestS1Overlap(t *testing.T) {
	b := newBuilder()
	b.acquire("a", "k", "ta", 1, 0, 0, 5)
	// b returns at 500 ms, inside a's window (a never released; its
	// deadline is ~990 ms).
	b.acquire("b", "k", "tb", 2, 400, 400, 500, 2, 3, 4)
	b.release("b", "k", "tb", 510, 511)
	r := check(t, b, cfg)
	want(t, r, map[Property]int{S1: 1, LIN: 1})
}

func TestS1ExtendCounts(t *testing.T) {
	// a's first deadline passes at ~990 ms, but a extended at 600 ms: b,
	// acquiring at 1200 ms, overlaps a's extended window.
	b := newBuilder()
	b.acquire("a", "k", "ta", 1, 0, 0, 5)
	b.extend("a", "k", "ta", 600, 603)
	b.acquire("b", "k", "tb", 2, 1150, 1150, 1200, 2, 3, 4)
	r := check(t, b, cfg)
	want(t, r, map[Property]int{S1: 1, LIN: 1})

	// Without the extend, the same acquisition is fine.
	b = newBuilder()
	b.acquire("a", "k", "ta", 1, 0, 0, 5)
	b.acquire("b", "k", "tb", 2, 1150, 1150, 1200, 2, 3, 4)
	want(t, check(t, b, cfg), nil)
}

func TestS1ReleaseEndsWindow(t *testing.T) {
	// b's winning round started before a's release; it returned after a
	// began releasing: no overlap.
	b := newBuilder()
	b.acquire("a", "k", "ta", 1, 0, 0, 5)
	b.release("a", "k", "ta", 100, 104)
	b.acquire("b", "k", "tb", 2, 90, 98, 102, 2, 3, 4)
	want(t, check(t, b, cfg), nil)
}

func TestS2(t *testing.T) {
	cases := []struct {
		name  string
		build func(b *builder)
		n     int
	}{
		{"two yes to SET", func(b *builder) { b.acquire("a", "k", "ta", 1, 0, 0, 5, 0, 1) }, 2}, // SET and write-back
		{"no validity left", noValidityLeft, 1},
		{"no validity left: its deadline passed while the process stood still", func(b *builder) {
			noValidityLeft(b)
			b.h.AddStall(Stall{Start: ms(7), End: ttl}) // decided before it, returned after
		}, 0},
		{"no validity left: a stall ended before its deadline", func(b *builder) {
			noValidityLeft(b)
			b.h.AddStall(Stall{Start: ms(7), End: ms(20)})
		}, 1}, // its text says when the stall ended (TestS2AfterStallSaysWhen)
		{"deadline not anchored at the round's start", func(b *builder) {
			// the deadline counts the TTL from 20 ms, the first SET left at 3 ms
			b.h.Add(Op{Client: "a", Key: "k", Kind: Acquire, Start: 0, End: ms(30), Outcome: OK, Token: "ta", Fence: 1, TTL: ttl, Deadline: ms(20) + ttl - allow})
			for n := range 3 {
				b.h.AddReply(Reply{Node: n, Kind: ReplyAcquire, Token: "ta", Start: ms(3), End: ms(25)})
				b.h.AddReply(Reply{Node: n, Kind: ReplyRaise, Token: "ta", Start: ms(26), End: ms(28)})
			}
		}, 1},
		{"yes after return does not count", func(b *builder) {
			b.h.Add(Op{Client: "a", Key: "k", Kind: Acquire, Start: 0, End: ms(10), Outcome: OK, Token: "ta", Fence: 1, TTL: ttl, Deadline: ttl - allow})
			for n := range 3 {
				b.h.AddReply(Reply{Node: n, Kind: ReplyAcquire, Token: "ta", Start: 0, End: ms(5 + 4*n)}) // node 2 at 13 ms
				b.h.AddReply(Reply{Node: n, Kind: ReplyRaise, Token: "ta", Start: ms(6), End: ms(8)})
			}
		}, 1},
		{"extend without quorum", func(b *builder) {
			b.acquire("a", "k", "ta", 1, 0, 0, 5)
			b.h.AddReply(Reply{Node: 0, Kind: ReplyExtend, Token: "ta", Start: ms(100), End: ms(101)})
			b.h.Add(Op{Client: "a", Key: "k", Kind: Extend, Start: ms(100), End: ms(102), Outcome: OK, Token: "ta", TTL: ttl, Deadline: ms(100) + ttl - allow})
		}, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := newBuilder()
			tc.build(b)
			r := check(t, b, cfg)
			if r.Count(S2) != tc.n {
				t.Errorf("S2: %d violations, want %d", r.Count(S2), tc.n)
			}
		})
	}
}

// TestS2AfterStallSaysWhen: an S2 violation whose deadline passed after a
// stall of the recording process ended says when it ended, so that a
// reader can tell a process catching up from a library that returned late.
func TestS2AfterStallSaysWhen(t *testing.T) {
	b := newBuilder()
	noValidityLeft(b)
	b.h.AddStall(Stall{Start: ms(7), End: ms(20)})
	r := check(t, b, cfg)
	if want := "that ended " + (ttl - allow - ms(20)).String() + " before the deadline"; !strings.Contains(r.String(), want) {
		t.Errorf("report lacks %q:\n%s", want, r)
	}
}

// noValidityLeft records an acquire that returned at its TTL, past its
// deadline, after a quorum of yes in its first 6 ms.
func noValidityLeft(b *builder) {
	b.h.Add(Op{Client: "a", Key: "k", Kind: Acquire, Start: 0, End: ttl, Outcome: OK, Token: "ta", Fence: 1, TTL: ttl, Deadline: ttl - allow})
	for n := range 3 {
		b.h.AddReply(Reply{Node: n, Kind: ReplyAcquire, Token: "ta", Start: 0, End: ms(5)})
		b.h.AddReply(Reply{Node: n, Kind: ReplyRaise, Token: "ta", Start: ms(5), End: ms(6)})
	}
}

func TestS4(t *testing.T) {
	b := newBuilder()
	b.acquire("a", "k", "ta", 5, 0, 0, 5)
	b.release("a", "k", "ta", 10, 11)
	b.acquire("b", "k", "tb", 5, 20, 20, 25) // equal: not greater
	b.release("b", "k", "tb", 30, 31)
	b.acquire("c", "k", "tc", 4, 40, 40, 45) // lower
	b.release("c", "k", "tc", 50, 51)
	b.acquire("d", "k", "td", 9, 60, 60, 65)
	r := check(t, b, cfg)
	want(t, r, map[Property]int{S4: 2})

	c := cfg
	c.Fencing = false
	if r := check(t, b, c); r.Count(S4) != 0 || r.Skipped[S4] == "" {
		t.Errorf("without fencing S4 must be skipped: %d violations, skipped %q", r.Count(S4), r.Skipped[S4])
	}
}

func TestS5(t *testing.T) {
	b := clean()
	b.h.SetCounter("k", 3) // four sections wrote
	r := check(t, b, cfg)
	want(t, r, map[Property]int{S5: 1})

	// A section whose write is unsure may or may not count.
	for _, v := range []int64{4, 5} {
		b = clean()
		b.h.AddSection(Section{Client: "c", Key: "k", Token: "tc", Fence: 3, Start: ms(33), End: ms(33), Counted: true, Read: 4, Unsure: true})
		b.h.SetCounter("k", v)
		want(t, check(t, b, cfg), nil)
	}
}

func TestLinearizability(t *testing.T) {
	// Windows do not overlap and the counter is right, but b's read-only
	// section saw a value from before a's last increment: not
	// linearizable.
	b := clean()
	b.h.AddSection(Section{Client: "b", Key: "k", Token: "tb", Fence: 2, Start: ms(22), End: ms(23), Counted: true, Read: 1})
	want(t, check(t, b, cfg), map[Property]int{LIN: 1})

	// A section of a holder that ran past its window is not held to the
	// lock, but its increment counts.
	b = clean()
	b.h.AddSection(Section{Client: "c", Key: "k", Token: "tc", Fence: 3, Start: ms(34), End: ms(40), Counted: true, Read: 4, Wrote: true})
	b.h.SetCounter("k", 5)
	r := check(t, b, cfg)
	want(t, r, nil)
	if !strings.Contains(strings.Join(r.Notes, "\n"), "after their holder's window") {
		t.Errorf("the overrun is not noted: %q", r.Notes)
	}
}

func TestL1(t *testing.T) {
	probe := func(holding ...int) Probe {
		p := Probe{Key: "j", Token: "td", TTL: ttl, Died: ms(50), LastTouch: ms(40)}
		for n := range nodes {
			pn := ProbeNode{Node: n, Reached: true, At: ms(51)}
			for _, h := range holding {
				if h == n {
					pn.Holds, pn.PTTL = true, 5000 // 5 s: far beyond the TTL
				}
			}
			p.Nodes = append(p.Nodes, pn)
		}
		return p
	}
	b := clean()
	b.h.AddProbe(probe(0, 1, 2)) // a quorum keeps it: not free
	want(t, check(t, b, cfg), map[Property]int{L1: 1})

	b = clean()
	b.h.AddProbe(probe(4)) // one node keeps it: the lock is free; noted
	r := check(t, b, cfg)
	want(t, r, nil)
	if !strings.Contains(strings.Join(r.Notes, "\n"), "node4") {
		t.Errorf("the overstay on node4 is not noted: %q", r.Notes)
	}

	b = clean()
	b.h.AddLeftovers(Leftover{Node: 1, Key: "quorumlock:{k}", Token: "tc", PTTL: -1})
	want(t, check(t, b, cfg), map[Property]int{L1: 1, L2: 1}) // tc was released, too
}

func TestL2(t *testing.T) {
	b := clean()
	b.h.AddLeftovers(Leftover{Node: 3, Key: "quorumlock:{k}", Token: "tc-1", PTTL: 800})
	want(t, check(t, b, cfg), map[Property]int{L2: 1})

	// A released lock's key left after the run: a late SET (or a release
	// that never reached a node) outlived the Release.
	b = clean()
	b.h.AddLeftovers(Leftover{Node: 3, Key: "quorumlock:{k}", Token: "tc", PTTL: 800})
	want(t, check(t, b, cfg), map[Property]int{L2: 1})

	// A failed attempt WithMetadata: the node holds the token with the
	// description after 0x1d, the Recorder knows it as generated.
	b = clean()
	b.h.AddLeftovers(Leftover{Node: 3, Key: "quorumlock:{k}", Token: "tc-1\x1dhost-a", PTTL: 800})
	want(t, check(t, b, cfg), map[Property]int{L2: 1})

	// A dead holder's key is not released: L1's business, not L2's.
	b = clean()
	b.h.AddLeftovers(Leftover{Node: 3, Key: "quorumlock:{j}", Token: "td", PTTL: 800})
	want(t, check(t, b, cfg), nil)
}

// Sweeps during the run judge a key of a failed round or a released lock
// only once the clean-up bound after its call has passed.
func TestL2Sweeps(t *testing.T) {
	c := cfg
	c.Cleanup = ms(300)
	// tc-1's failed call returned at 23 ms; ta was released at 18 ms.

	b := clean()
	sweep(b, 100, Leftover{Node: 1, Key: "quorumlock:{k}", Token: "tc-1", PTTL: 900}) // within the bound
	sweep(b, 200, Leftover{Node: 1, Key: "quorumlock:{k}", Token: "ta", PTTL: 900})
	sweep(b, 250)
	r := check(t, b, c)
	want(t, r, nil)
	if !strings.Contains(strings.Join(r.Notes, "\n"), "3 sweeps") {
		t.Errorf("the sweeps are not noted: %q", r.Notes)
	}

	b = clean()
	sweep(b, 323, Leftover{Node: 1, Key: "quorumlock:{k}", Token: "tc-1", PTTL: 600})
	sweep(b, 400, Leftover{Node: 1, Key: "quorumlock:{k}", Token: "tc-1", PTTL: 500}) // the same key again: one violation
	sweep(b, 400, Leftover{Node: 2, Key: "quorumlock:{k}", Token: "ta", PTTL: 500})
	sweep(b, 330, Leftover{Node: 2, Key: "quorumlock:{k}", Token: "tc", PTTL: 500}) // released at 35 ms: within the bound
	sweep(b, 400, Leftover{Node: 2, Key: "quorumlock:{j}", Token: "td", PTTL: 500}) // dead holder: L1
	want(t, check(t, b, c), map[Property]int{L2: 2})

	// A key seen by a sweep and by the final scan is one violation.
	b = clean()
	sweep(b, 400, Leftover{Node: 1, Key: "quorumlock:{k}", Token: "tc-1", PTTL: 600})
	b.h.AddLeftovers(Leftover{Node: 1, Key: "quorumlock:{k}", Token: "tc-1", PTTL: 500})
	want(t, check(t, b, c), map[Property]int{L2: 1})

	// A key seen more than node timeout + TTL after its call landed late:
	// noted even while the clean-up bound has not passed.
	c.Cleanup = 2 * time.Second
	sweptClean(t, c, 1123, 900, "1 keys of ours they found only within the clean-up bound (2s) of their call were not judged, 1 of them")

	// Without a bound, sweeps are noted, not judged.
	sweptClean(t, cfg, 5000, 600, "not judged")
}

// sweep records a sweep at ms that found ls.
func sweep(b *builder, at int, ls ...Leftover) {
	for i := range ls {
		ls[i].At = ms(at)
	}
	b.h.AddSweep(ls...)
}

// sweptClean checks the clean history with one sweep at ms that found
// tc-1's key with pttl left on node 1: no violation, and a note saying
// note.
func sweptClean(t *testing.T, c Config, at int, pttl int64, note string) {
	t.Helper()
	b := clean()
	sweep(b, at, Leftover{Node: 1, Key: "quorumlock:{k}", Token: "tc-1", PTTL: pttl})
	r := check(t, b, c)
	want(t, r, nil)
	if !strings.Contains(strings.Join(r.Notes, "\n"), note) {
		t.Errorf("no note says %q: %q", note, r.Notes)
	}
}

func TestSkipped(t *testing.T) {
	b := newBuilder()
	b.acquire("a", "k", "ta", 1, 0, 0, 5)
	r := check(t, b, Config{Nodes: nodes})
	for _, p := range []Property{S3, S4, S5, L1, L2} {
		if r.Skipped[p] == "" {
			t.Errorf("%s: not reported as skipped", p)
		}
	}
	if !strings.Contains(r.String(), "not checked") {
		t.Errorf("summary does not say what was not checked:\n%s", r)
	}
}

// A long sequential history is cut into segments, so its check is fast.
func TestLinearizabilityScales(t *testing.T) {
	b := newBuilder()
	const n = 20000
	for i := range n {
		t0 := i * 10
		tok := fmt.Sprintf("t%d", i)
		b.acquire("a", "k", tok, uint64(i+1), t0, t0, t0+2)
		b.section("a", "k", tok, uint64(i+1), t0+3, t0+4, int64(i))
		b.release("a", "k", tok, t0+5, t0+6)
	}
	b.h.SetCounter("k", n)
	start := time.Now()
	r := Check(b.h, cfg)
	t.Logf("%d holdings checked in %v", n, time.Since(start))
	want(t, r, nil)
	if r.Checked[LIN] != n {
		t.Errorf("%d segments, want %d", r.Checked[LIN], n)
	}
}

// TestL2Horizon: with a horizon, a key is judged by when it landed (the
// lock TTL less its PTTL before it was read): one that landed within the
// horizon must be gone Recheck after it landed; one that landed after the
// horizon is left to its TTL and only noted.
func TestL2Horizon(t *testing.T) {
	c := cfg
	c.Cleanup, c.Horizon, c.Recheck = ms(300), ms(2000), ms(500)
	ttl := ms(1000) // the longest TTL of clean()'s operations
	sweep := func(b *builder, at, pttl int, token string) {
		b.h.AddSweep(Leftover{Node: 1, Key: "quorumlock:{k}", Token: token, PTTL: int64(pttl), At: ms(at)})
	}
	// tc-1's failed call returned at 23 ms. Landed at 1400 ms (within the
	// horizon), seen 100 ms later: not yet judged; seen 700 ms later: a
	// violation.
	b := clean()
	sweep(b, 1500, int(ttl/time.Millisecond)-100, "tc-1")
	want(t, check(t, b, c), nil)
	b = clean()
	sweep(b, 2100, int(ttl/time.Millisecond)-700, "tc-1")
	want(t, check(t, b, c), map[Property]int{L2: 1})

	// Landed at 2500 ms, after the horizon: left to its TTL, noted, in a
	// sweep and in the final scan alike.
	b = clean()
	sweep(b, 2900, int(ttl/time.Millisecond)-400, "tc-1")
	b.h.AddLeftovers(Leftover{Node: 2, Key: "quorumlock:{k}", Token: "tc-1", PTTL: int64(ttl/time.Millisecond) - 500, At: ms(3000)})
	r := check(t, b, c)
	want(t, r, nil)
	if !strings.Contains(strings.Join(r.Notes, "\n"), "2 keys of ours landed later than the library's horizon") {
		t.Errorf("the keys beyond the horizon are not noted: %q", r.Notes)
	}
}

// TestL2PlainKeyInSessionRun: in a run with session locks the horizon is a
// session key's (10 × TTL + the background time), but a key that is no
// session lock's (a lock of several keys, a shared holder, in such a run)
// is re-released only for its own TTL + the background time: one that
// landed after that is left to its TTL, not reported.
func TestL2PlainKeyInSessionRun(t *testing.T) {
	c := cfg
	c.Cleanup, c.Recheck, c.SessionKeyTTL = ms(300), ms(500), 10*ms(1000)
	c.Horizon = c.SessionKeyTTL + ms(300)
	ttl := ms(1000) // tc-1's, which returned at 23 ms
	b := clean()    // landed at 2000 ms: after 1000 + 300, long before 10300
	b.h.AddSweep(Leftover{Node: 1, Key: "quorumlock:{k}", Token: "tc-1", PTTL: int64(ttl/time.Millisecond) - 1000, At: ms(3000)})
	want(t, check(t, b, c), nil)
	b = clean() // landed at 1000 ms, seen 1000 ms later: a violation
	b.h.AddSweep(Leftover{Node: 1, Key: "quorumlock:{k}", Token: "tc-1", PTTL: 0, At: ms(2000)})
	want(t, check(t, b, c), map[Property]int{L2: 1})
}

// TestL2LandedByItsOwnTTL: a key is judged by when it landed, read from
// the TTL its own call asked for, not the longest any call asked for. tc-1's
// failed acquire asked for 1 s; another lock's Extend asked for 4 s. Seen
// with 900 ms left, tc-1's key landed 100 ms earlier: not yet judged (it
// would have been 3.1 s earlier by the longest TTL, and reported).
func TestL2LandedByItsOwnTTL(t *testing.T) {
	c := cfg
	c.Cleanup, c.Horizon, c.Recheck = ms(300), ms(5000), ms(500)
	b := clean()
	b.h.Add(Op{Client: "e", Key: "j", Kind: Extend, Start: ms(1101), End: ms(1101), Outcome: Failed, Token: "te", TTL: 4 * time.Second})
	b.h.AddSweep(Leftover{Node: 1, Key: "quorumlock:{k}", Token: "tc-1", PTTL: 900, At: ms(3500)})
	want(t, check(t, b, c), nil)
	// Seen 600 ms after it landed, Recheck (500 ms) later: a violation.
	b = clean()
	b.h.Add(Op{Client: "e", Key: "j", Kind: Extend, Start: ms(1101), End: ms(1101), Outcome: Failed, Token: "te", TTL: 4 * time.Second})
	b.h.AddSweep(Leftover{Node: 1, Key: "quorumlock:{k}", Token: "tc-1", PTTL: 400, At: ms(3500)})
	want(t, check(t, b, c), map[Property]int{L2: 1})
}

// TestS2RenewalInsideExtend: an Extend call of an auto-extended lock may
// wait for a renewal round of the same lock; the renewal's yes-replies fall
// within the call but were sent before the round its deadline counts from.
// They neither back the deadline nor disprove it: a quorum of the call's own
// round does.
func TestS2RenewalInsideExtend(t *testing.T) {
	build := func(own ...int) *builder {
		b := newBuilder()
		b.acquire("a", "k", "ta", 1, 0, 0, 5)
		for n := range 3 { // the renewal, sent at 100 ms
			b.h.AddReply(Reply{Node: n, Kind: ReplyExtend, Token: "ta", Start: ms(100), End: ms(104)})
		}
		for _, n := range own { // the call's own round, from 110 ms
			b.h.AddReply(Reply{Node: n, Kind: ReplyExtend, Token: "ta", Start: ms(110), End: ms(113)})
		}
		b.h.Add(Op{Client: "a", Key: "k", Kind: Extend, Start: ms(98), End: ms(114), Outcome: OK, Token: "ta", TTL: ttl, Deadline: ms(110) + ttl - allow})
		return b
	}
	want(t, check(t, build(0, 1, 3), cfg), nil)
	// Only the renewal's quorum: the deadline, counted from 110 ms, is not
	// backed.
	r := check(t, build(4), cfg)
	want(t, r, map[Property]int{S2: 1})
	if !strings.Contains(r.Violations[0].Msg, "only 1 nodes said yes to requests sent at or after it") {
		t.Errorf("violation: %v", r.Violations[0])
	}
}
