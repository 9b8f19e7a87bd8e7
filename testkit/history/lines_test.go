package history

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/node"
)

// Waiters of Lock, their lines, and what the nodes hold beside a key:
// hand-made histories for WF, LV, LB and ERR.

// lineTTL is the waiters' entry TTL in these histories.
const lineTTL = 500 * time.Millisecond

// lineCfg is cfg with every property of lines asked for.
func lineCfg() Config {
	c := cfg
	c.WritersFirst, c.LineMax, c.SharedMax, c.ErrorReplies = true, 32, 32, true
	c.Calm, c.CalmLatency = true, ms(5)
	return c
}

// waiterCmd records one command of waiter w of who on nodes 0 to 2, sent at
// start and answered at end; the answers are counted (ERR's cases).
func (b *builder) waiterCmd(who, w, key, tok string, kind LineKind, ans LineAnswer, start, end int) {
	for n := range 3 {
		b.h.AddLineCmd(LineCmd{Client: who, Node: n, Key: "quorumlock:" + key, Waiter: w, Token: tok, Kind: kind, Answer: ans,
			TTL: lineTTL, Start: ms(start), End: ms(end)})
	}
	b.h.answers.Add(3)
}

// lockCall records a Lock call of key by who (waiting up to wait ms)
// whose rounds used tried and, if it won, tok.
func (b *builder) lockCall(who, key, tok string, start, end, wait int, tried ...string) {
	op := Op{Client: who, Key: key, Kind: Acquire, Start: ms(start), End: ms(end), Outcome: Failed, TTL: ttl, Tried: tried, Wait: ms(wait)}
	if tok != "" {
		op.Outcome, op.Token, op.Fence, op.Deadline = OK, tok, 20, ms(start)+ttl-allow
	}
	b.h.Add(op)
}

// lines adds to b a correct history of key r: p holds it shared; w waits
// in its line (told "taken"), p leaves, w takes it (fenced, 20) and
// releases it; p2 holds it shared; q joins it as v's Lock call begins,
// before v's attempt joins the line; v's Lock gives up while p2 holds it,
// and v's shared TryLock right after is let in.
func lines(b *builder) {
	b.acquireShared("p", "r", "tp", 4000, 4000, 4005)
	b.waiterCmd("w", "w.1", "r", "tw-1", LineAttempt, Taken, 4006, 4007)
	b.releaseShared("p", "r", "tp", 4020, 4021)
	b.waiterCmd("w", "w.1", "r", "tw", LineAttempt, Took, 4022, 4023)
	b.acquire("w", "r", "tw", 20, 4006, 4022, 4024)
	b.h.ops[len(b.h.ops)-1].Wait = -1 // a Lock call
	b.release("w", "r", "tw", 4030, 4031)
	b.waiterCmd("w", "w.1", "r", "", LineRelease, Taken, 4030, 4031)
	b.acquireShared("p2", "r", "tp2", 4040, 4040, 4045)
	b.acquireShared("q", "r", "tq0", 4049, 4049, 4051) // its yes ran before v joined
	b.releaseShared("q", "r", "tq0", 4100, 4101)
	b.waiterCmd("v", "v.1", "r", "tv-1", LineAttempt, Taken, 4050, 4051)
	b.waiterCmd("v", "v.1", "r", "", LineLeave, Taken, 4059, 4060)
	b.lockCall("v", "r", "", 4050, 4060, 10, "tv-1")
	b.acquireShared("v", "r", "tv2", 4061, 4061, 4063)
	b.releaseShared("v", "r", "tv2", 4064, 4065)
	b.releaseShared("p2", "r", "tp2", 4200, 4201)
	b.h.AddSetSizes(SetSize{Node: 0, Key: "quorumlock:r\x1fq", Members: 1, At: ms(4007)})
}

// linesOnly is a history of lines alone.
func linesOnly() *builder {
	b := newBuilder()
	lines(b)
	return b
}

func TestLinesClean(t *testing.T) {
	r := check(t, linesOnly(), lineCfg())
	want(t, r, nil)
	for _, p := range []Property{WF, LB, ERR, LV} {
		if r.Checked[p] == 0 {
			t.Errorf("%s checked no case", p)
		}
	}
}

// TestWFReaderAfterWriter: a shared holder admitted on a node while a
// waiter of Lock, told "taken" there just before, still polls is reported;
// one admitted after the waiter's entry lapsed (its polls stopped reaching
// the node), or after it took the key there, is not.
func TestWFReaderAfterWriter(t *testing.T) {
	b := linesOnly()
	b.waiterCmd("x", "x.1", "r", "tx-1", LineAttempt, Taken, 4100, 4101)
	b.waiterCmd("x", "x.1", "r", "tx-2", LineAttempt, Taken, 4300, 4301)
	b.acquireShared("q", "r", "tq", 4310, 4310, 4315) // while x waits
	b.releaseShared("q", "r", "tq", 4316, 4317)
	b.lockCall("x", "r", "", 4100, 4400, 300, "tx-1", "tx-2")
	r := check(t, b, lineCfg())
	want(t, r, map[Property]int{WF: 1})
	if v := r.Violations; len(v) != 1 || !strings.Contains(v[0].Msg, "x.1") {
		t.Errorf("violations: %v", v)
	}

	b = linesOnly()
	b.waiterCmd("x", "x.1", "r", "tx-1", LineAttempt, Taken, 4100, 4101)
	b.acquireShared("q", "r", "tq", 4700, 4700, 4705) // x's entry lapsed at 4600 - allowance
	b.releaseShared("q", "r", "tq", 4706, 4707)
	b.waiterCmd("x", "x.1", "r", "tx-2", LineAttempt, Unknown, 4710, 4720)
	b.acquireShared("s", "r", "ts", 4721, 4721, 4725) // after an attempt of unknown fate
	b.releaseShared("s", "r", "ts", 4726, 4727)
	b.waiterCmd("x", "x.1", "r", "tx-3", LineAttempt, Taken, 4730, 4731)
	b.lockCall("x", "r", "", 4100, 4800, 700, "tx-1", "tx-2", "tx-3")
	want(t, check(t, b, lineCfg()), nil)
}

// TestWFFullLine: a key whose line may have been full is not judged (a
// waiter told "taken" may have no place in it).
func TestWFFullLine(t *testing.T) {
	b := linesOnly()
	b.waiterCmd("x", "x.1", "r", "tx-1", LineAttempt, Taken, 4300, 4301)
	b.acquireShared("q", "r", "tq", 4310, 4310, 4315)
	b.releaseShared("q", "r", "tq", 4316, 4317)
	b.lockCall("x", "r", "", 4300, 4400, 100, "tx-1")
	c := lineCfg()
	c.LineMax = 3 // w, v and x
	want(t, check(t, b, c), nil)
}

// TestLVWriterThatLeft: a node's refusal of a shared acquire sent right
// after its own Client's Lock call gave up, while a shared holder was live
// there, is reported; one on a node where no shared holder was certainly
// live, one sent while a waiter of another Client may still have been in
// the line, and any in a run that was not calm, are not judged.
func TestLVWriterThatLeft(t *testing.T) {
	refuse := func(b *builder, node int) {
		b.h.Add(Op{Client: "v", Key: "r", Kind: Acquire, Shared: true, Start: ms(4070), End: ms(4072), Outcome: Failed, TTL: ttl, Tried: []string{"tv3"}})
		b.h.AddRefusal(Refusal{Client: "v", Node: node, Key: "quorumlock:{r}", Token: "tv3", Start: ms(4070), End: ms(4071)})
	}
	b := linesOnly()
	refuse(b, 0)
	want(t, check(t, b, lineCfg()), map[Property]int{LV: 1})

	b = linesOnly()
	refuse(b, 3) // p2 said yes on nodes 0 to 2 only
	want(t, check(t, b, lineCfg()), nil)

	b = linesOnly()
	b.lockCall("y", "r", "", 4060, 4068, 8)
	refuse(b, 0)
	want(t, check(t, b, lineCfg()), nil) // y's leave may not have landed: 4068 + 5 > 4070
	c := lineCfg()
	c.Calm = false
	b = linesOnly()
	refuse(b, 0)
	r := check(t, b, c)
	want(t, r, nil)
	if _, skipped := r.Skipped[LV]; !skipped {
		t.Error("LV judged a run that was not calm")
	}
}

// TestLBBounds: a set beyond its bound is reported once per node and set,
// at its largest; sets within their bounds are not.
func TestLBBounds(t *testing.T) {
	b := linesOnly()
	b.h.AddSetSizes(SetSize{Node: 1, Key: "quorumlock:r\x1fq", Members: 32, At: ms(10)},
		SetSize{Node: 1, Key: "quorumlock:r\x1fr", Members: 40, At: ms(10)})
	b.h.AddSetSizes(SetSize{Node: 1, Key: "quorumlock:r\x1fg", Members: 33, At: ms(20)},
		SetSize{Node: 1, Key: "quorumlock:r\x1fr", Members: 50, At: ms(20)}, SetSize{Node: 2, Key: "quorumlock:r\x1fx", Members: 31, At: ms(20)})
	r := check(t, b, lineCfg())
	want(t, r, map[Property]int{LB: 2})
	for _, v := range r.Violations {
		if strings.Contains(v.Msg, "40 members") {
			t.Errorf("reported a set below its largest: %v", v)
		}
	}
}

// testRedisError is a node's error reply, as go-redis types it.
type testRedisError string

func (e testRedisError) Error() string { return string(e) }
func (testRedisError) RedisError()     {}

// TestERRErrorReply: an error reply a node gave is reported; a timeout and
// the nil reply are not; nothing is judged when the run may inject them.
func TestERRErrorReply(t *testing.T) {
	b := linesOnly()
	op := &node.Op{Kind: node.AcquireShared, Key: "quorumlock:r", Token: "tz"}
	b.h.answered("z", 1, op, ms(5), node.Result{Err: testRedisError("ERR Error running script: attempt to compare nil with number")})
	b.h.answered("z", 2, op, ms(5), node.Result{Err: context.DeadlineExceeded})
	r := check(t, b, lineCfg())
	want(t, r, map[Property]int{ERR: 1})
	c := lineCfg()
	c.ErrorReplies = false
	want(t, check(t, b, c), nil)
}

// TestLineCmdClassified: RecordReplies' record of a waiter's commands.
func TestLineCmdClassified(t *testing.T) {
	h := New()
	for _, tc := range []struct {
		op  node.Op
		res node.Result
		ok  bool
		k   LineKind
		ans LineAnswer
	}{
		{node.Op{Kind: node.Acquire, Waiter: "w.1", Token: "t"}, node.Result{Int: -2}, true, LineAttempt, Taken},
		{node.Op{Kind: node.Acquire, Waiter: "w.1", Token: "t"}, node.Result{Int: 1}, true, LineAttempt, Took},
		{node.Op{Kind: node.AcquireFenced, Waiter: "w.1", Token: "t"}, node.Result{Int: 7}, true, LineAttempt, Took},
		{node.Op{Kind: node.AcquireSession, Waiter: "w.1", Token: "t"}, node.Result{Err: node.ErrNotSent}, true, LineAttempt, NotSent},
		{node.Op{Kind: node.Acquire, Waiter: "w.1", Token: "t"}, node.Result{Err: context.DeadlineExceeded}, true, LineAttempt, Unknown},
		{node.Op{Kind: node.Leave, Waiter: "w.1"}, node.Result{}, true, LineLeave, Taken},
		{node.Op{Kind: node.Acquire, Token: "t"}, node.Result{Int: 0}, false, 0, 0},
		{node.Op{Kind: node.AcquireShared, Waiter: "w.1", Token: "t"}, node.Result{Int: 0}, false, 0, 0},
	} {
		h.answered("c", 0, &tc.op, 0, tc.res)
		c, ok := lineCmd(&tc.op, tc.res)
		if ok != tc.ok || ok && (c.Kind != tc.k || c.Answer != tc.ans) {
			t.Errorf("%+v answered %+v: recorded %v as %+v, want %v, kind %d, answer %d", tc.op, tc.res, ok, c, tc.ok, tc.k, tc.ans)
		}
	}
	if s := h.snapshot(); s.answers != 8 || len(s.lines) != 6 {
		t.Errorf("%d answers counted, %d waiter's commands recorded; want 8 and 6", s.answers, len(s.lines))
	}
}

// TestResumedMarkIsAHolder: a Resume of a value no acquisition won (a
// shared key's mark) that succeeds is a lock held alone: it overlaps the
// shared holder (S1); one that fails is nothing, and a resume of a lock's
// own token is that lock.
func TestResumedMarkIsAHolder(t *testing.T) {
	b := newBuilder()
	b.acquireShared("p", "r", "tp", 0, 0, 5)
	mark := "\x1ctp"
	b.extend("z", "r", mark, 10, 12)
	b.h.ops[len(b.h.ops)-1].Resumed = true
	b.releaseShared("p", "r", "tp", 20, 21)
	b.release("z", "r", mark, 22, 23)
	want(t, check(t, b, cfg), map[Property]int{S1: 1, LIN: 1})

	b = newBuilder()
	b.acquireShared("p", "r", "tp", 0, 0, 5)
	b.h.Add(Op{Client: "z", Key: "r", Kind: Extend, Resumed: true, Token: mark, Start: ms(10), End: ms(12), Outcome: Failed, TTL: ttl})
	b.releaseShared("p", "r", "tp", 20, 21)
	b.acquire("a", "k", "ta", 1, 30, 30, 31)
	b.extend("a", "k", "ta", 40, 41) // a resume of a's token: a's lock
	b.h.ops[len(b.h.ops)-1].Resumed = true
	b.release("a", "k", "ta", 50, 51)
	want(t, check(t, b, cfg), nil)
}
