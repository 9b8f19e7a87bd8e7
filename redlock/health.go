package redlock

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// health logs each node's outages once: the first failed command after the
// node answered ("node X unreachable since ..."), and its first answer
// after that ("node X answers again"), with the failed commands counted in
// between rather than logged one by one. A dead node makes every operation
// fail there; without this, each would log. Safe for concurrent use; a nil
// *health (the Client logs nothing) does nothing.
type health struct {
	log   *slog.Logger
	nodes []nodeHealth
}

type nodeHealth struct {
	down   atomic.Bool // the fast path of answered: false while the node answers
	mu     sync.Mutex
	since  time.Time // the first failure of the outage
	failed int       // failed commands in the outage
}

// newHealth returns the health log of nodes on log, or nil when log
// discards warnings.
func newHealth(log *slog.Logger, nodes int) *health {
	if !log.Enabled(context.Background(), slog.LevelWarn) {
		return nil
	}
	return &health{log: log, nodes: make([]nodeHealth, nodes)}
}

// failed records a command on node name (index i) that failed with err: it
// logs when this begins an outage.
func (h *health) failed(i int, name string, err error) {
	if h == nil {
		return
	}
	n := &h.nodes[i]
	n.mu.Lock()
	first := n.failed == 0
	if first {
		n.since = time.Now()
		n.down.Store(true)
	}
	n.failed++
	since := n.since
	n.mu.Unlock()
	if first {
		what := "unreachable" // no answer: down, cut off, too slow
		if refused(err) {
			what = "refusing lock commands" // an error reply: NOPERM, READONLY, OOM...
		}
		h.log.Warn(fmt.Sprintf("redlock: node %s %s since %s; keys this Client could not release there expire with their TTL; further failures are counted, not logged, until it answers again", name, what, since.Format(time.RFC3339Nano)),
			"pool", name, "since", since, "err", err)
	}
}

// answered records an answer of node name (index i): it logs when this
// ends an outage.
func (h *health) answered(i int, name string) {
	if h == nil || !h.nodes[i].down.Load() {
		return
	}
	n := &h.nodes[i]
	n.mu.Lock()
	since, failed := n.since, n.failed
	n.failed = 0
	n.down.Store(false)
	n.mu.Unlock()
	if failed > 0 {
		h.log.Info(fmt.Sprintf("redlock: node %s answers again after %v unreachable (%d failed commands)", name, time.Since(since).Round(time.Millisecond), failed),
			"pool", name, "down_for", time.Since(since), "failed_commands", failed)
	}
}
