package sim

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/quorumlock/quorumlock/internal/node"
)

// call is one command a client's Pool sent to a node, followed from the
// moment the Pool took it to the moment its caller had an answer (done),
// and on to its landing on the node, which may come later: a command the
// caller gave up on may still run.
type call struct {
	seq  int
	p    *simPool
	op   *node.Op
	rcv  node.Receiver
	tag  int
	fate fate

	deadline time.Time // the round's

	epoch int // the node's epoch when it was written

	mu      sync.Mutex
	done    bool        // the receiver has its answer
	landing *time.Timer // until it lands
	timers  []*time.Timer
}

func (c *call) String() string {
	o := c.op
	var b strings.Builder
	fmt.Fprintf(&b, "%s→%s#%d %s %q", c.p.client, c.p.n.name, c.seq, kindNames[o.Kind], o.Key)
	if o.Token != "" {
		fmt.Fprintf(&b, " token %s", short(o.Token))
	}
	if o.TTL > 0 {
		fmt.Fprintf(&b, " ttl %v", o.TTL)
	}
	if o.Kind == node.ExtendMany {
		fmt.Fprintf(&b, " %d keys", len(o.Keys))
	}
	return b.String()
}

// short is a token as traced: whole, up to 24 bytes (the library's random
// tokens are 22; a session lock's, its session's 16 and a counter).
func short(tok string) string {
	if len(tok) > 24 {
		return tok[:24]
	}
	return tok
}

var kindNames = map[node.Kind]string{
	node.Acquire: "ACQUIRE", node.AcquireFenced: "ACQUIRE-FENCED", node.RaiseFence: "RAISE-FENCE",
	node.Extend: "EXTEND", node.Release: "RELEASE", node.Get: "GET", node.ExtendMany: "EXTEND-MANY",
	node.AcquireSession: "ACQUIRE-SESSION", node.RenewSession: "RENEW-SESSION", node.Peek: "PEEK", node.Leave: "LEAVE",
	node.Resume: "RESUME", node.Inspect: "INSPECT", node.AcquireAll: "ACQUIRE-ALL", node.ReleaseAll: "RELEASE-ALL", node.HeldAll: "HELD-ALL",
	node.AcquireShared: "ACQUIRE-SHARED", node.ExtendShared: "EXTEND-SHARED", node.ReleaseShared: "RELEASE-SHARED", node.HeldShared: "HELD-SHARED",
	node.AcquirePermit: "ACQUIRE-PERMIT", node.ExtendPermit: "EXTEND-PERMIT",
}

func (c *call) isDone() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.done
}

// after runs f after d, unless the call is answered first (then f is
// stopped, except the landing, which the answer never stops).
func (c *call) after(d time.Duration, f func()) {
	t := time.AfterFunc(d, f)
	c.mu.Lock()
	c.timers = append(c.timers, t)
	c.mu.Unlock()
}

// finish gives the caller its answer, once; later answers are dropped.
// While the caller's client stands still, the answer waits for the stall's
// end (finish then reports false).
func (c *call) finish(r node.Result) bool {
	if c.p.gate.hold(func() { c.deliverLate(r) }) {
		return false
	}
	return c.deliver(r)
}

// deliverLate is deliver at a stall's end.
func (c *call) deliverLate(r node.Result) {
	if c.deliver(r) && c.p.tr.on {
		c.p.tr.add("%s: answered at the end of its client's stall: %s", c, resultString(r))
	}
}

// deliver is finish, now.
func (c *call) deliver(r node.Result) bool {
	c.mu.Lock()
	if c.done {
		c.mu.Unlock()
		return false
	}
	c.done = true
	ts := c.timers
	c.timers = nil
	c.mu.Unlock()
	for _, t := range ts {
		t.Stop()
	}
	c.p.n.disconnect(c)
	c.p.net.rd.delivered(c.p.client, c.p.n.id, c.op, r)
	c.rcv.Deliver(c.tag, r)
	return true
}

// ran is the node's reply: it reaches the caller after the fate's return
// latency, unless the fate drops it.
func (c *call) ran(r node.Result) {
	if c.fate.drop {
		c.p.tr.add("%s: reply dropped", c)
		return
	}
	c.after(c.fate.down, func() {
		if c.p.net.cut(c.p.client, c.p.n.id) {
			c.p.tr.add("%s: reply lost in a partition", c)
			return
		}
		if dropStalledReplies && c.p.gate.stalled() > 0 { // the defect of quorumlock_bug_stalldrop
			c.p.tr.add("%s: reply dropped (its client stands still)", c)
			return
		}
		if c.finish(r) {
			c.p.tr.add("%s: answered", c)
		}
	})
}

// reset is the connection breaking before the answer: the caller hears
// err. A command that had not landed yet lands anyway when its fate says
// its bytes had left (a reset does not recall them), else never.
func (c *call) reset(err error) {
	c.mu.Lock()
	if !c.fate.landsAfterReset && c.landing != nil {
		c.landing.Stop()
	}
	c.mu.Unlock()
	if c.finish(node.Result{Err: err}) {
		c.p.tr.add("%s: connection reset", c)
	}
}
