package history

import (
	"fmt"
	"time"
)

// Refusal is a node's "taken" to a shared holder's acquire (the script
// ran and did not admit it), as RecordReplies saw it (LV): sent at Start,
// answered at End.
type Refusal struct {
	Client     string
	Node       int
	Key        string // the Redis key
	Token      string
	Start, End time.Duration
}

// AddRefusal records a node's refusal of a shared acquire (LV).
// RecordReplies records them; tests that build a history by hand call it.
func (h *History) AddRefusal(f Refusal) { add(h, &h.refusals, f) }

// checkLV: a Lock call that ended holds no reader back. A waiter of Lock
// for a key alone sits in the key's line on the nodes, which refuse new
// shared holders while it waits (WF); a Lock call that ends without the
// lock leaves the line before it returns, in order with its Client's later
// commands (docs/design.md, "Hand-off"), so that a shared holder asking
// next is not refused as behind a waiter that is gone.
//
// In a calm run (Config.Calm: no fault; every command landed within
// Config.CalmLatency of being sent), a node's refusal of a shared acquire
// (a Refusal: sent at Start, so it ran after) violates LV when
//
//   - a shared holder of the key was certainly live on that node while the
//     refused command could run: one of its yes there (acquire or extend)
//     was answered before the command was sent, and sent no longer than
//     its shortest TTL less the drift allowance before the command's
//     answer, and its release had not begun by then. The node then held
//     the key shared, nobody held it alone, and only a waiter in its line
//     (or a full set of shared holders) makes it refuse;
//   - every waiter of Lock for the key alone (an acquire of one key, not
//     shared, with Op.Wait not 0) that started before the refused command
//     was answered had returned before the command was sent: in the
//     command's own Client (its leave went first), or CalmLatency earlier
//     in another Client (its leave, sent before it returned, had landed);
//   - fewer than Config.SharedMax shared acquire calls (0: no bound) and
//     fewer than Config.LineMax waiters of Lock (a full set of the waiters
//     that left a line keeps no more of them out) of the key were made in
//     the run.
func checkLV(s snapshot, byKey map[string][]*holding, cfg Config, r *Report) {
	if !cfg.Calm {
		r.Skipped[LV] = "not a calm run (Config.Calm)"
		return
	}
	ops := acquireByToken(s.ops)
	crowded := crowdedKeys(s.ops, cfg)
	for _, op := range s.ops { // the cases: the shared acquire calls judged
		if op.Kind == Acquire && op.Shared && !crowded[op.Key] {
			r.Checked[LV]++
		}
	}
	for _, f := range s.refusals {
		op := lookupToken(ops, f.Token)
		if op == nil || !op.Shared || crowded[op.Key] {
			continue
		}
		x := liveReader(s, byKey[op.Key], f, cfg)
		if x == nil {
			continue
		}
		last, live := lastWriter(s.ops, op.Key, f, cfg.CalmLatency)
		if live {
			continue
		}
		r.add(LV, op.Key, "node%d refused %s's shared acquire (sent at %v, answered at %v) while %s was a live shared holder there and no waiter of Lock for the key was left (%s)",
			f.Node, f.Client, us(f.Start), us(f.End), x, lastSaid(last))
	}
}

// crowdedKeys are the keys LV does not judge: with SharedMax or more
// shared acquire calls, or LineMax or more waiters of Lock, in the run.
func crowdedKeys(ops []Op, cfg Config) map[string]bool {
	readers, writers := map[string]int{}, map[string]int{}
	for _, op := range ops {
		switch {
		case op.Kind == Acquire && op.Shared:
			readers[op.Key]++
		case lineWaiter(op):
			writers[op.Key]++
		}
	}
	m := map[string]bool{}
	for k, n := range readers {
		m[k] = cfg.SharedMax > 0 && n >= cfg.SharedMax
	}
	for k, n := range writers {
		m[k] = m[k] || cfg.LineMax > 0 && n >= cfg.LineMax
	}
	return m
}

// lineWaiter reports whether op is a Lock call that may wait in its key's
// line: an acquire of one key, held alone, that waits.
func lineWaiter(op Op) bool {
	return op.Kind == Acquire && !op.Shared && op.Wait != 0 && op.Keys == nil && op.Semaphore == "" && !op.Election
}

// liveReader returns a shared holder among xs certainly live on f's node
// while f's command could run (see checkLV), or nil.
func liveReader(s snapshot, xs []*holding, f Refusal, cfg Config) *holding {
	for _, x := range xs {
		if !x.shared || x.released && x.end < f.End {
			continue
		}
		ttl := shortestTTL(s.ops, x)
		for _, rep := range s.replies[x.token] {
			if rep.Node == f.Node && (rep.Kind == ReplyAcquire || rep.Kind == ReplyExtend) &&
				rep.End <= f.Start && rep.Start+ttl-allowance(ttl, cfg) >= f.End {
				return x
			}
		}
	}
	return nil
}

// shortestTTL is the shortest TTL x's acquire and extends asked for.
func shortestTTL(ops []Op, x *holding) time.Duration {
	ttl := x.ttl
	for _, op := range ops {
		if op.Token == x.token && op.Kind == Extend && op.TTL > 0 {
			ttl = min(ttl, op.TTL)
		}
	}
	return ttl
}

// lastWriter returns the waiter of Lock for key that returned last before
// f's command was sent, and live true when a waiter may still have been in
// the line while it ran (see checkLV).
func lastWriter(ops []Op, key string, f Refusal, calm time.Duration) (last Op, live bool) {
	for _, w := range ops {
		if !lineWaiter(w) || w.Key != key || w.Start >= f.End {
			continue
		}
		gone := w.End
		if w.Client != f.Client {
			gone += calm
		}
		if gone > f.Start {
			return w, true
		}
		if w.End > last.End {
			last = w
		}
	}
	return last, false
}

// lastSaid describes the last waiter of Lock before a refusal.
func lastSaid(last Op) string {
	if last.Client == "" {
		return "there was none"
	}
	return fmt.Sprintf("the last one, %s's, had returned at %v", last.Client, us(last.End))
}
