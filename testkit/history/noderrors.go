package history

import (
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/internal/node"
)

// NodeError is an error reply a node gave to one of a client's commands
// (a script that raised an error, WRONGTYPE, READONLY, NOPERM...), as
// RecordReplies saw it (ERR).
type NodeError struct {
	Client string
	Node   int
	Kind   node.Kind // the command's
	Key    string    // the Redis key
	Token  string
	Err    string
	At     time.Duration // when the answer came
}

// AddNodeError records an error reply (ERR). RecordReplies records them;
// tests that build a history by hand call it.
func (h *History) AddNodeError(e NodeError) { add(h, &h.nodeErrs, e) }

// answer is one answer RecordReplies delivered that may be worth
// recording (a waiter's command, a shared acquire, an error), kept as it
// came and classified when Check reads the History (classify).
type answer struct {
	op         *node.Op
	client     string
	node       int
	start, end time.Duration
	res        node.Result
}

// answered counts an answer RecordReplies delivered (ERR's cases) and
// keeps it when it may be an error reply (ERR), a waiter's command (WF) or
// a refusal of a shared acquire (LV). It only appends: the simulator
// delivers answers on short-lived goroutines, whose small stacks deeper
// work would make grow on every answer.
func (h *History) answered(client string, n int, op *node.Op, start time.Duration, res node.Result) {
	h.answers.Add(1)
	_, bad := res.Err.(redis.Error) // as the Pools deliver them: not wrapped
	refused := op.Kind == node.AcquireShared && res.Err == nil && res.Int == 0
	if op.Waiter == "" && !bad && !refused {
		return
	}
	a := answer{op: op, client: client, node: n, start: start, end: h.Now(), res: res}
	h.mu.Lock()
	h.raw = append(h.raw, a)
	h.mu.Unlock()
}

// classify sorts the answers kept into the records they make: a waiter's
// commands, the refusals of shared acquires and the error replies.
func classify(raw []answer) (lines []LineCmd, refusals []Refusal, errs []NodeError) {
	lines = make([]LineCmd, 0, len(raw))
	for _, a := range raw {
		op, res := a.op, a.res
		if lc, ok := lineCmd(op, res); ok {
			lc.Client, lc.Node, lc.Start, lc.End = a.client, a.node, a.start, a.end
			lines = append(lines, lc)
		}
		if op.Kind == node.AcquireShared && res.Err == nil && res.Int == 0 {
			refusals = append(refusals, Refusal{Client: a.client, Node: a.node, Key: op.Key, Token: op.Token, Start: a.start, End: a.end})
		}
		if errorReply(res.Err) {
			errs = append(errs, NodeError{Client: a.client, Node: a.node, Kind: op.Kind, Key: op.Key, Token: op.Token, Err: res.Err.Error(), At: a.end})
		}
	}
	return lines, refusals, errs
}

// checkERR: no node gave an error reply to a recorded command, when the
// run injects none (Config.ErrorReplies). The library's scripts answer
// with an error only when something is wrong: a script that raised
// (a bug of the script, a key of the wrong type), a refusal the run did
// not inject.
func checkERR(s snapshot, cfg Config, r *Report) {
	switch {
	case !cfg.ErrorReplies:
		r.Skipped[ERR] = "error replies may be injected (Config.ErrorReplies false)"
		return
	case s.answers == 0 && len(s.nodeErrs) == 0:
		r.Skipped[ERR] = "no answer recorded (RecordReplies)"
		return
	}
	r.Checked[ERR] = s.answers
	for _, e := range s.nodeErrs {
		r.add(ERR, e.Key, "node%d answered %s's %s (token %q) at %v with an error: %s", e.Node, e.Client, kindName(e.Kind), e.Token, us(e.At), e.Err)
	}
}

// kindName names a command kind in messages.
func kindName(k node.Kind) string {
	if n, ok := nodeKindNames[k]; ok {
		return n
	}
	return "command"
}

var nodeKindNames = map[node.Kind]string{
	node.Acquire: "acquire", node.AcquireFenced: "fenced acquire", node.RaiseFence: "fence write-back",
	node.Extend: "extend", node.Release: "release", node.Get: "GET", node.ExtendMany: "batched extend",
	node.AcquireSession: "session acquire", node.RenewSession: "session renewal", node.Peek: "peek", node.Leave: "leave",
	node.Resume: "resume", node.Inspect: "inspect", node.AcquireAll: "acquire of several keys", node.ReleaseAll: "release of several keys",
	node.HeldAll: "held of several keys", node.AcquireShared: "shared acquire", node.ExtendShared: "shared extend",
	node.ReleaseShared: "shared release", node.HeldShared: "shared held", node.AcquirePermit: "permit acquire", node.ExtendPermit: "permit extend",
}
