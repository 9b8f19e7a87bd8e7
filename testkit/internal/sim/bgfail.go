package sim

import (
	"time"

	"github.com/quorumlock/quorumlock/internal/node"
)

// bgFailed reports whether op, sent now from client to node, is a
// background release sent in one of its link's stretches of failing
// background sends (schedule.bgCuts: a background lane whose connection
// cannot be made for a while). Such a release is never written: the
// library must send it again (docs/design.md, "A release never written").
func (nw *network) bgFailed(client string, nodeID int, op *node.Op) bool {
	if !op.Background || len(nw.bgCuts) == 0 {
		return false
	}
	switch op.Kind {
	case node.Release, node.ReleaseAll, node.ReleaseShared:
		return nw.within(nw.bgCuts[link{client, nodeID}])
	}
	return false
}

// unwritten fails c as a command that was never written: every other one
// as queued past its deadline (node.ErrNotSent, at the deadline), the
// others as a refused dial (at once).
func (p *simPool) unwritten(c *call) {
	if c.seq%2 == 0 {
		p.tr.add("%s: not sent (its lane cannot connect; queued past its deadline)", c)
		time.AfterFunc(max(time.Until(c.deadline), 0), func() { c.finish(node.Result{Err: node.ErrNotSent}) })
		return
	}
	p.tr.add("%s: refused (its lane cannot connect)", c)
	time.AfterFunc(50*time.Microsecond, func() { c.finish(node.Result{Err: errRefused}) })
}
