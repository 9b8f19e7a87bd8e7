package history

import (
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/scripts"
)

// Session locks: hand-made histories of locks whose deadline moves with
// their session's renewals (ReplyRenew, Lease), not with recorded extends.

const (
	sidA  = "sessionAAAAAAAAA" // 16 characters: the session id
	sessA = "quorumlock:s:" + sidA
	sidB  = "sessionBBBBBBBBB"
	sessB = "quorumlock:s:" + sidB
)

// sessAcquire records a successful acquire of a session lock: yes from
// nodes 0-2 with incarnation inc, in a round started at round.
func (b *builder) sessAcquire(who, key, tok, sess string, inc int64, start, round, ret int) {
	for _, n := range []int{0, 1, 2} {
		b.h.AddReply(Reply{Client: who, Node: n, Kind: ReplyAcquire, Key: key, Token: tok, Start: ms(round), End: ms(ret - 1), Session: sess, Inc: inc})
	}
	b.h.Add(Op{Client: who, Key: key, Kind: Acquire, Start: ms(start), End: ms(ret), Outcome: OK, Token: tok, TTL: ttl, Deadline: ms(round) + ttl - allow, Session: sess})
}

// renew records session renewals confirmed by nodes 0-2, sent at start.
func (b *builder) renew(who, sess, inc string, start, end int) {
	for _, n := range []int{0, 1, 2} {
		b.h.AddReply(Reply{Client: who, Node: n, Kind: ReplyRenew, Key: sess, Token: inc, Start: ms(start), End: ms(end)})
	}
}

// held records a Deadline read by the holder of tok at at: the one its
// renewals up to then give (the last renewal sent at from).
func (b *builder) held(who, key, tok string, at, from int) {
	b.h.AddLease(Lease{Client: who, Key: key, Token: tok, At: ms(at), Deadline: ms(from) + ttl - allow})
}

// sessions: a holds k for 2.5 s on a session renewed every 300 ms, then
// releases; b, waiting, gets it after.
func sessions() *builder {
	b := newBuilder()
	b.sessAcquire("a", "k", sidA+"1", sessA, 1, 0, 0, 5)
	for t := 300; t <= 2400; t += 300 {
		b.renew("a", sessA, "1", t, t+2)
		b.held("a", "k", sidA+"1", t+3, t)
	}
	b.release("a", "k", sidA+"1", 2500, 2502)
	b.sessAcquire("b", "k", sidB+"1", sessB, 4, 2400, 2501, 2503)
	b.release("b", "k", sidB+"1", 2600, 2602)
	return b
}

var sessCfg = Config{Nodes: nodes, NodeTimeout: ms(50), Replies: true}

func TestSessionClean(t *testing.T) {
	r := check(t, sessions(), sessCfg)
	want(t, r, nil)
	if r.Checked[S1] != 1 || r.Checked[S2] < 10 {
		t.Errorf("checked %v: want one S1 pair and every lease (S2)", r.Checked)
	}
}

// A session lock's window lasts as long as the deadlines its holder read:
// b acquiring while a's renewed deadline lies ahead is an overlap, although
// a's acquire alone gave it only one TTL.
func TestSessionOverlap(t *testing.T) {
	b := sessions()
	b.sessAcquire("c", "k", "sessionCCCCCCCCC1", "quorumlock:s:sessionCCCCCCCCC", 9, 1800, 1900, 1905)
	b.release("c", "k", "sessionCCCCCCCCC1", 1906, 1907)
	r := check(t, b, sessCfg)
	if r.Count(S1) == 0 || r.Count(LIN) == 0 {
		t.Errorf("c acquired inside a's renewed window: %d S1, %d LIN violations", r.Count(S1), r.Count(LIN))
	}

	// Without the leases, a's window would have ended at its first
	// deadline: the same acquisition would pass. The leases are what
	// catch it.
	b = newBuilder()
	b.sessAcquire("a", "k", sidA+"1", sessA, 1, 0, 0, 5)
	b.release("a", "k", sidA+"1", 2500, 2502)
	b.sessAcquire("c", "k", "sessionCCCCCCCCC1", "quorumlock:s:sessionCCCCCCCCC", 9, 1800, 1900, 1905)
	b.release("c", "k", "sessionCCCCCCCCC1", 1906, 1907)
	want(t, check(t, b, sessCfg), nil)
}

// A lock its holder saw lost (its leases stop, Done closed at the deadline)
// is not held against it: the next holder may acquire after that deadline.
func TestSessionLostNotHeldAgainst(t *testing.T) {
	b := newBuilder()
	b.sessAcquire("a", "k", sidA+"1", sessA, 1, 0, 0, 5)
	b.renew("a", sessA, "1", 300, 302)
	b.held("a", "k", sidA+"1", 303, 300)
	b.held("a", "k", sidA+"1", 300+int((ttl-allow)/time.Millisecond)+2, 300) // after Done closed
	lost := 300 + int((ttl-allow)/time.Millisecond)
	b.release("a", "k", sidA+"1", lost+500, lost+501) // long after: the window ended at the loss
	b.sessAcquire("b", "k", sidB+"1", sessB, 4, lost, lost+30, lost+40)
	b.release("b", "k", sidB+"1", lost+50, lost+60)
	want(t, check(t, b, sessCfg), nil)
}

// S2: every deadline a session lock was given needs a quorum of
// confirmations of its incarnation from rounds that started late enough.
func TestSessionS2(t *testing.T) {
	// A deadline read with no renewal behind it.
	b := sessions()
	b.held("a", "k", sidA+"1", 2450, 2450)
	want(t, check(t, b, sessCfg), map[Property]int{S2: 1})

	cases := []struct {
		name  string
		renew func(b *builder)
		read  int // when the deadline (300 ms) was read
	}{
		// The session ended and was created again on the nodes: renewals
		// of another incarnation do not vouch for the lock.
		{"another incarnation", func(b *builder) { b.renew("a", sessA, "2", 300, 302) }, 303},
		{"two nodes are no quorum", func(b *builder) {
			for _, n := range []int{0, 1} {
				b.h.AddReply(Reply{Client: "a", Node: n, Kind: ReplyRenew, Key: sessA, Token: "1", Start: ms(300), End: ms(302)})
			}
		}, 303},
		{"confirmation seen after the read", func(b *builder) { b.renew("a", sessA, "1", 300, 310) }, 305},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := newBuilder()
			b.sessAcquire("a", "k", sidA+"1", sessA, 1, 0, 0, 5)
			tc.renew(b)
			b.held("a", "k", sidA+"1", tc.read, 300)
			b.release("a", "k", sidA+"1", 400, 402)
			want(t, check(t, b, sessCfg), map[Property]int{S2: 1})
		})
	}
}

// L1 and L2 for session locks: a session lock's key outlives its TTL by
// design and is free once its session key no longer holds its incarnation;
// held, it is judged like any key, and its session key must not outlive
// the TTL.
func TestSessionLeftovers(t *testing.T) {
	val := func(tok, inc string) string { return tok + "\x1f" + inc + "\x1f11" }
	const key = "quorumlock:{k}"
	c := sessCfg
	c.Cleanup = ms(300)

	// b's failed round left a key in a's session whose session ended: free.
	b := sessions()
	b.failed("a", "k", 2600, 2610, sidA+"2")
	b.h.AddLeftovers(Leftover{Node: 0, Key: key, Token: val(sidA+"2", "1"), PTTL: 9000, SessionInc: "", SessionPTTL: -2})
	r := check(t, b, c)
	want(t, r, nil)
	if !strings.Contains(strings.Join(r.Notes, "\n"), "session had ended") {
		t.Errorf("the free session key is not noted: %q", r.Notes)
	}
	// The same key while its session lives: held, a leftover (L2).
	b = sessions()
	b.failed("a", "k", 2600, 2610, sidA+"2")
	b.h.AddLeftovers(Leftover{Node: 0, Key: key, Token: val(sidA+"2", "1"), PTTL: 9000, SessionInc: "1", SessionPTTL: 900})
	want(t, check(t, b, c), map[Property]int{L2: 1})
	// Found by a sweep, once the clean-up bound has passed.
	b = sessions()
	b.failed("a", "k", 2600, 2610, sidA+"2")
	b.h.AddSweep(Leftover{Node: 0, Key: key, Token: val(sidA+"2", "1"), PTTL: 9500, At: ms(3000), SessionInc: "1", SessionPTTL: 900})
	want(t, check(t, b, c), map[Property]int{L2: 1})
	b = sessions()
	b.failed("a", "k", 2600, 2610, sidA+"2")
	b.h.AddSweep(Leftover{Node: 0, Key: key, Token: val(sidA+"2", "1"), PTTL: 9500, At: ms(3000), SessionInc: "7", SessionPTTL: 900})
	want(t, check(t, b, c), nil)
	// Landed past the horizon: left to its own TTL by the leftover bound
	// (case 3: held while its session lives, at most its key's TTL, which
	// L1 checks below), even held by its live session more than a TTL after
	// it landed; within the horizon, the same key is a violation.
	c.Horizon, c.Recheck = ms(1000), ms(100)
	b = sessions()
	b.failed("a", "k", 2600, 2610, sidA+"2")
	landed := 5000
	b.h.AddSweep(Leftover{Node: 0, Key: key, Token: val(sidA+"2", "1"), PTTL: int64(10000 - 500), At: ms(landed + 500), SessionInc: "1", SessionPTTL: 900})
	b.h.AddSweep(Leftover{Node: 0, Key: key, Token: val(sidA+"2", "1"), PTTL: int64(10000 - 1500), At: ms(landed + 1500), SessionInc: "1", SessionPTTL: 900})
	want(t, check(t, b, c), nil)
	c.Horizon = ms(10000)
	want(t, check(t, b, c), map[Property]int{L2: 1})

	// L1: a session key without a TTL, or longer than the TTL, keeps the
	// lock held; a lock key past the session key TTL is never collected.
	for _, tc := range []struct {
		name string
		l    Leftover
		bad  bool
	}{
		{"held, session key within TTL", Leftover{Node: 1, Key: key, Token: val(sidA+"9", "1"), PTTL: 9000, SessionInc: "1", SessionPTTL: 900}, false},
		{"free, its key within 10 TTL", Leftover{Node: 1, Key: key, Token: val(sidA+"9", "1"), PTTL: 9000}, false},
		{"session key without TTL", Leftover{Node: 1, Key: key, Token: val(sidA+"9", "1"), PTTL: 9000, SessionInc: "1", SessionPTTL: -1}, true},
		{"session key past the TTL", Leftover{Node: 1, Key: key, Token: val(sidA+"9", "1"), PTTL: 9000, SessionInc: "1", SessionPTTL: 1500}, true},
		{"lock key without TTL", Leftover{Node: 1, Key: key, Token: val(sidA+"9", "1"), PTTL: -1}, true},
		{"lock key past 10 TTL", Leftover{Node: 1, Key: key, Token: val(sidA+"9", "1"), PTTL: 12000}, true},
		{"session key itself past the TTL", Leftover{Node: 1, Key: sessA, Token: "1", PTTL: 1500}, true},
	} {
		b := sessions()
		b.h.AddLeftovers(tc.l)
		r := check(t, b, sessCfg)
		if got := r.Count(L1) > 0; got != tc.bad {
			t.Errorf("%s: %d L1 violations, want a violation: %v", tc.name, r.Count(L1), tc.bad)
		}
	}
}

func sessionAcquireLines(key, tok, sess, inc string, creates bool) []string {
	l := []string{evalsha(scripts.AcquireSession, []string{key, sess, "quorumlock:s:seq"}, tok, "2000", "20000", "11"), lua("GET", key), lua("GET", sess)}
	if creates {
		l = append(l, lua("INCR", "quorumlock:s:seq"), lua("SET", sess, inc, "PX", "2000"))
	} else {
		l = append(l, lua("PEXPIRE", sess, "2000", "GT"))
	}
	return append(l, lua("SET", key, tok+`\x1f`+inc+`\x1f11`, "PX", "20000"))
}

func renewLines(sess, inc string, renews bool) []string {
	l := []string{evalsha(scripts.RenewSession, []string{sess}, inc, "2000"), lua("GET", sess)}
	if renews {
		l = append(l, lua("PEXPIRE", sess, "2000", "GT"))
	}
	return l
}

func extendManyLines(keys, toks []string) []string {
	l := []string{evalsha(scripts.ExtendMany, keys, append([]string{"20000"}, toks...)...)}
	for _, k := range keys {
		l = append(l, lua("GET", k), lua("PEXPIRE", k, "20000", "GT"))
	}
	return l
}

const lk2 = "quorumlock:{k2}"

func TestAuditSessions(t *testing.T) {
	ta, tb := sidA+"1", sidA+"2"
	a := NewAudit(AuditConfig{Prefix: "quorumlock:"})
	feed(a, 0, sessionAcquireLines(lk, ta, sessA, "1", true)...)
	feed(a, 0, sessionAcquireLines(lk2, tb, sessA, "1", false)...)
	feed(a, 0, renewLines(sessA, "1", true)...)
	feed(a, 0, extendManyLines([]string{lk, lk2}, []string{ta, tb})...)
	feed(a, 0, evalsha(scripts.Peek, []string{lk}), lua("GET", lk), lua("GET", sessA))
	feed(a, 0, releaseLines(lk, ta, true)...)
	feed(a, 0, releaseLines(lk2, tb, true)...)
	feed(a, 0, renewLines(sessA, "1", false)...) // no locks left, but the key lives: no change either way
	if f, n := a.Findings(); n != 0 {
		t.Fatalf("violations in a correct stream: %v", f)
	}
	if st := a.Stats(); st.Checked != 5 || st.Unchecked != 0 || st.External != 0 {
		t.Errorf("stats %+v, want 5 checked (renewal, two batched extends, two deletes)", st)
	}

	for _, tc := range []struct {
		name  string
		lines []string
	}{
		{"renewal of another incarnation", renewLines(sessA, "2", true)},
		{"batched extend of another token", extendManyLines([]string{lk2, lk}, []string{tb, tb})},
		{"DEL of a session key from a client", []string{`1.0 [0 127.0.0.1:9] "del" "` + sessA + `"`}},
		{"a write by the read-only peek", []string{evalsha(scripts.Peek, []string{lk}), lua("DEL", lk)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := NewAudit(AuditConfig{Prefix: "quorumlock:"})
			feed(a, 2, sessionAcquireLines(lk, ta, sessA, "1", true)...)
			feed(a, 2, sessionAcquireLines(lk2, tb, sessA, "1", false)...)
			feed(a, 2, tc.lines...)
			f, n := a.Findings()
			if n != 1 {
				t.Fatalf("%d violations, want 1: %v", n, f)
			}
			t.Log(f[0])
		})
	}
}

// A lock its client declared lost before its deadline (a node said its
// session had ended: Done closed early) is not held against it once its
// holder saw Done closed; before that, it is.
func TestSessionDoneEndsWindow(t *testing.T) {
	build := func(doneSeen bool, next int) *builder {
		b := newBuilder()
		b.sessAcquire("a", "k", sidA+"1", sessA, 1, 0, 0, 5)
		b.renew("a", sessA, "1", 300, 302)
		b.held("a", "k", sidA+"1", 303, 300) // deadline 300 + TTL − allowance
		if doneSeen {
			b.h.AddLease(Lease{Client: "a", Key: "k", Token: sidA + "1", At: ms(600), Deadline: ms(590), Done: true})
		}
		b.release("a", "k", sidA+"1", 1200, 1201)
		b.sessAcquire("b", "k", sidB+"1", sessB, 4, next-10, next-5, next)
		b.release("b", "k", sidB+"1", next+10, next+11)
		return b
	}
	want(t, check(t, build(true, 700), sessCfg), nil)
	r := check(t, build(false, 700), sessCfg)
	if r.Count(S1) != 1 {
		t.Errorf("b acquired inside a's window (no Done seen): %d S1 violations, want 1", r.Count(S1))
	}
	r = check(t, build(true, 550), sessCfg)
	if r.Count(S1) != 1 {
		t.Errorf("b acquired before a saw its lock lost: %d S1 violations, want 1", r.Count(S1))
	}
}

// A failed round's yes to a session acquire confirmed the session on its
// nodes, for every lock of it: Forget keeps it, and it backs the deadline.
func TestSessionFailedRoundConfirms(t *testing.T) {
	b := newBuilder()
	b.sessAcquire("a", "k", sidA+"1", sessA, 1, 0, 0, 5)
	for _, n := range []int{0, 1, 2} {
		b.h.AddReply(Reply{Client: "a", Node: n, Kind: ReplyAcquire, Key: "quorumlock:{j}", Token: sidA + "2", Start: ms(300), End: ms(302), Session: sessA, Inc: 1})
	}
	b.failed("a", "j", 299, 303, sidA+"2")
	b.h.Forget([]string{sidA + "2"})
	b.held("a", "k", sidA+"1", 304, 300)
	b.release("a", "k", sidA+"1", 400, 402)
	want(t, check(t, b, sessCfg), nil)
}

// A client that crashed cleans up nothing: its keys are left to expire and
// judged against the crash, not against its calls' clean-up bound.
func TestCrashedClientLeftovers(t *testing.T) {
	val := sidA + "2\x1f1\x1f11"
	build := func(at int) *builder {
		b := sessions()
		b.failed("a", "k", 2600, 2610, sidA+"2")
		b.h.Add(Op{Client: "a", Kind: Crash, Start: ms(2700), End: ms(2700)})
		b.h.AddLeftovers(Leftover{Node: 0, Key: "quorumlock:{k}", Token: val, PTTL: 9000, At: ms(at), SessionInc: "1", SessionPTTL: 500})
		return b
	}
	want(t, check(t, build(3000), sessCfg), nil)
	want(t, check(t, build(2700+int((ttl+2*allow)/time.Millisecond)+60), sessCfg), map[Property]int{L2: 1})
}
