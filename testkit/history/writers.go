package history

import (
	"slices"
	"time"

	"github.com/quorumlock/quorumlock/internal/node"
)

// waiterLife is what the record tells of one waiter of Lock (one Lock call
// of a key alone) on the nodes: per node, the intervals of the History's
// clock during which its entry was certainly live in the key's line there.
type waiterLife struct {
	op    *Op
	name  string
	live  map[int][]liveSpan
	cmds  []LineCmd
	until time.Duration // the intervals end here (see certainLife)
}

// liveSpan is an interval [from, to) of the History's clock.
type liveSpan struct{ from, to time.Duration }

func (s liveSpan) holds(from, to time.Duration) bool { return s.from <= from && to <= s.to }

// checkWF: writers first (docs/design.md, "Shared holders"). While a waiter
// of Lock for a key alone (the writer) is in the key's line on a node, that
// node admits no shared holder of the key: a waiting writer waits only for
// the shared holders of the moment. The rule, judged node by node on the
// record of RecordReplies, is sound under every fault that keeps the
// nodes' data:
//
//   - The writer's entry is certainly live on node n from the answer of an
//     attempt the node told "taken" (End: the attempt ran, and put or kept
//     the writer in the line) until its Start + the entry's TTL less the
//     drift allowance (the entry lapses that long after the attempt ran,
//     on the node's clock, and it ran after Start). A waiter whose polls
//     stop reaching a node (a partition, a paused or killed node, polls
//     lost or late for longer than the TTL) has no such interval there.
//   - Only the writer's own commands take it out of the line early: an
//     attempt that took the key there, its leave, its lock's release. So
//     the intervals end at the Start of the first of its commands whose
//     answer was anything but "taken" or "never sent" (a yes, an error, an
//     unknown fate, a leave, a release), and at the end of its Lock call.
//   - A full line takes no newcomer, whose "taken" then puts it nowhere:
//     a key whose line may have been full (Config.LineMax or more Lock
//     calls of the key in the run, each one waiter) is not judged.
//
// A shared holder (a successful shared acquisition) violates WF when one of
// the yes that admitted it (a recorded ReplyAcquire: sent at Start,
// answered at End, so it ran in between) ran on node n wholly inside an
// interval in which a writer's entry was certainly live on n. Amnesia
// (a restart without data) breaks the rule's premise: set
// Config.WritersFirst only for runs that keep the nodes' data.
func checkWF(s snapshot, byKey map[string][]*holding, cfg Config, r *Report) {
	switch {
	case !cfg.WritersFirst:
		r.Skipped[WF] = "not asked for (Config.WritersFirst: the nodes keep their data)"
		return
	case len(s.lines) == 0:
		r.Skipped[WF] = "no command of a waiter of Lock recorded (RecordReplies)"
		return
	}
	for _, w := range waiterLives(s, byKey, cfg) {
		for _, x := range byKey[w.op.Key] {
			if overlaps(x, w.op) && len(w.live) > 0 {
				r.Checked[WF]++
				judgeWF(s, w, x, r)
			}
		}
	}
}

// judgeWF reports shared holder x if a yes that admitted it ran inside one
// of writer w's certain intervals on its node.
func judgeWF(s snapshot, w *waiterLife, x *holding, r *Report) {
	for _, rep := range s.replies[x.token] {
		if rep.Kind != ReplyAcquire {
			continue
		}
		for _, sp := range w.live[rep.Node] {
			if sp.holds(rep.Start, rep.End) {
				r.add(WF, w.op.Key, "node%d admitted shared holder %s (its yes ran within [%v, %v]) while the waiter %s of %s's Lock call (started %v) was certainly in the key's line there (in [%v, %v))",
					rep.Node, x, us(rep.Start), us(rep.End), w.name, w.op.Client, us(w.op.Start), us(sp.from), us(sp.to))
				return
			}
		}
	}
}

// overlaps reports whether x is a shared holder whose acquire call
// overlapped op's: a yes that admitted x ran within x's call, and one WF
// judges, within op's.
func overlaps(x *holding, op *Op) bool {
	return x.shared && x.start < op.End && x.ret > op.Start
}

// reader reports whether a shared holder of op's key overlapped op's call.
func reader(byKey map[string][]*holding, op *Op) bool {
	for _, x := range byKey[op.Key] {
		if overlaps(x, op) {
			return true
		}
	}
	return false
}

// waiterLives gathers from the record the waiters of Lock that a shared
// holder's call overlapped, with their certain intervals, leaving out
// those of keys whose line may have been full (Config.LineMax or more Lock
// calls of the key in the run: each is one waiter).
func waiterLives(s snapshot, byKey map[string][]*holding, cfg Config) []*waiterLife {
	ops := acquireByToken(s.ops)
	calls := map[string]int{}
	for _, op := range s.ops {
		if lineWaiter(op) {
			calls[op.Key]++
		}
	}
	byName := map[string]*waiterLife{}
	var out []*waiterLife
	for _, c := range s.lines { // the waiters judged, named by an attempt
		if c.Kind != LineAttempt || byName[c.Waiter] != nil {
			continue
		}
		op := lookupToken(ops, c.Token)
		if op != nil && reader(byKey, op) && (cfg.LineMax <= 0 || calls[op.Key] < cfg.LineMax) {
			byName[c.Waiter] = &waiterLife{name: c.Waiter, op: op}
			out = append(out, byName[c.Waiter])
		}
	}
	if len(out) == 0 {
		return nil
	}
	for _, c := range s.lines {
		if w := byName[c.Waiter]; w != nil {
			w.cmds = append(w.cmds, c)
		}
	}
	for _, w := range out {
		w.certainLife(cfg)
	}
	return out
}

// certainLife sets w.live from w's commands (see checkWF).
func (w *waiterLife) certainLife(cfg Config) {
	w.until = w.op.End
	for _, c := range w.cmds {
		if c.Kind != LineAttempt || c.Answer != Taken && c.Answer != NotSent {
			w.until = min(w.until, c.Start)
		}
	}
	w.live = map[int][]liveSpan{}
	for _, c := range w.cmds {
		if c.Kind != LineAttempt || c.Answer != Taken || c.Start >= w.until {
			continue
		}
		sp := liveSpan{c.End, min(c.Start+c.TTL-allowance(c.TTL, cfg), w.until)}
		if sp.from < sp.to {
			w.live[c.Node] = append(w.live[c.Node], sp)
		}
	}
}

// acquireByToken indexes the acquire calls by every token their rounds
// used (Op.Token, Op.Tried), also without a description
// (node.SplitToken).
func acquireByToken(ops []Op) map[string]*Op {
	m := map[string]*Op{}
	for i := range ops {
		op := &ops[i]
		if op.Kind != Acquire {
			continue
		}
		for _, tok := range slices.Concat(op.Tried, []string{op.Token}) {
			if tok != "" {
				m[tok] = op
			}
		}
	}
	return m
}

// lookupToken finds tok's acquire call, with or without its description.
func lookupToken(m map[string]*Op, tok string) *Op {
	if op := m[tok]; op != nil {
		return op
	}
	own, _ := node.SplitToken(tok)
	return m[own]
}
