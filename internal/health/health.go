// Package health logs each node's outages once, and its error replies once
// per kind and period, so that a dead node does not make every operation
// log (docs/design.md, "Logging").
package health

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/pool"
)

// Log logs each node's outages once: the first failed command after the
// node answered ("node X unreachable since ..."), and its first answer
// after that ("node X answers again"), with the failed commands counted in
// between rather than logged one by one. A dead node makes every operation
// fail there; without this, each would log. A node that flaps (a Cluster
// pool with one shard's master gone fails for some keys and answers for
// others) would still log a pair of lines per flap: an outage that begins
// less than outageEvery after the last logged one is counted, not logged,
// and so is its end. Error replies (NOPERM, OOM,
// READONLY, WRONGTYPE...) are no outage, since the node answers: each kind
// is logged at most once per node per refusalEvery. Safe for concurrent
// use; a nil *Log (the Client logs nothing) does nothing.
type Log struct {
	log   *slog.Logger
	names []string
	nodes []nodeHealth
}

type nodeHealth struct {
	down     atomic.Bool // the fast path of answered: false while the node answers
	mu       sync.Mutex
	since    time.Time            // the first failure of the outage
	failed   int                  // failed commands in the outage
	lastLine time.Time            // when an outage's beginning was last logged (== since: this one's was)
	quiet    int                  // outages not logged since then
	refusal  map[string]time.Time // error reply kind: when last logged
}

// refusalEvery bounds how often one kind of error reply of one node is
// logged; outageEvery how often one node's outages are.
const (
	refusalEvery = 10 * time.Minute
	outageEvery  = time.Minute
)

// New returns the health log, on log, of the nodes named names (by
// index), or nil when log discards warnings.
func New(log *slog.Logger, names []string) *Log {
	if !log.Enabled(context.Background(), slog.LevelWarn) {
		return nil
	}
	return &Log{log: log, names: names, nodes: make([]nodeHealth, len(names))}
}

// Failed records a command on node i that failed with err: it logs when
// this begins an outage, or when err is an error reply of a kind not logged
// for refusalEvery.
func (h *Log) Failed(i int, err error) {
	if h == nil {
		return
	}
	name := h.names[i]
	if node.Refused(err) || errors.Is(err, pool.ErrRestarted) {
		h.refused(i, name, err)
		return
	}
	n := &h.nodes[i]
	n.mu.Lock()
	log, quiet := false, 0
	if n.failed == 0 {
		log, quiet = n.begin(time.Now())
	}
	n.failed++
	since := n.since
	n.mu.Unlock()
	if !log {
		return
	}
	unlogged := ""
	switch quiet {
	case 0:
	case 1:
		unlogged = " (after 1 shorter outage, not logged)"
	default:
		unlogged = fmt.Sprintf(" (after %d shorter outages, not logged)", quiet)
	}
	h.log.Warn(fmt.Sprintf("redlock: node %s unreachable since %s%s; keys this Client could not release there expire with their TTL; further failures are counted, not logged, until it answers", name, since.Format(time.RFC3339Nano), unlogged),
		"pool", name, "since", since, "err", err, "unlogged_outages", quiet)
}

// begin starts an outage of n at now (n.mu held): it reports whether to
// log it (no outage of n was logged for outageEvery) and, if so, how many
// outages began unlogged since the last logged one.
func (n *nodeHealth) begin(now time.Time) (log bool, quiet int) {
	n.since = now
	n.down.Store(true)
	if !n.lastLine.IsZero() && now.Sub(n.lastLine) < outageEvery {
		n.quiet++
		return false, 0
	}
	n.lastLine, quiet, n.quiet = now, n.quiet, 0
	return true, quiet
}

// refused logs node name's error reply err, unless one of its kind (its
// first word: OOM, READONLY...; all refusals of the Client's credentials
// or rights are one kind) was logged less than refusalEvery ago.
func (h *Log) refused(i int, name string, err error) {
	kind, _, _ := strings.Cut(err.Error(), " ")
	what := node.AuthRefusal(err)
	switch {
	case what != "":
		kind = "auth"
	case errors.Is(err, pool.ErrRestarted):
		kind = "restarted"
	}
	n := &h.nodes[i]
	now := time.Now()
	n.mu.Lock()
	last, seen := n.refusal[kind]
	log := !seen || now.Sub(last) >= refusalEvery
	if log {
		if n.refusal == nil {
			n.refusal = map[string]time.Time{}
		}
		n.refusal[kind] = now
	}
	n.mu.Unlock()
	switch {
	case !log:
	case kind == "restarted": // it answers; its Pool keeps it out of votes
		h.log.Warn(fmt.Sprintf("redlock: node %s is kept out of votes for now: %v; operations go on while the other nodes can make a quorum; logged once per %v", name, err, refusalEvery),
			"pool", name, "err", err)
	case what != "": // the command wrote nothing
		h.log.Warn(fmt.Sprintf("redlock: node %s refuses this Client: %s (%v); operations go on while the other nodes can make a quorum; check the pool's password, user and ACL rules; logged once per %v", name, what, err, refusalEvery),
			"pool", name, "err", err)
	default:
		h.log.Warn(fmt.Sprintf("redlock: node %s refuses a lock command: %v; its key there expires with its TTL; this kind of refusal is logged once per %v", name, err, refusalEvery),
			"pool", name, "err", err)
	}
}

// Answered records an answer of node i: it logs when this ends an
// outage, at the outage's level.
func (h *Log) Answered(i int) {
	if h == nil || !h.nodes[i].down.Load() {
		return
	}
	name := h.names[i]
	n := &h.nodes[i]
	n.mu.Lock()
	since, failed := n.since, n.failed
	if !n.lastLine.Equal(n.since) {
		failed = 0 // an outage not logged ends unlogged
	}
	n.failed = 0
	n.down.Store(false)
	n.mu.Unlock()
	if failed > 0 {
		h.log.Warn(fmt.Sprintf("redlock: node %s answers again after %v unreachable (%d failed commands)", name, time.Since(since).Round(time.Millisecond), failed),
			"pool", name, "down_for", time.Since(since), "failed_commands", failed)
	}
}
