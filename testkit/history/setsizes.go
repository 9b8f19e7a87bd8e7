package history

import (
	"github.com/quorumlock/quorumlock/internal/node"

	"fmt"
	"strings"
	"time"
)

// SetSize is the number of members of one of the sorted sets a node keeps
// beside a lock key, as a read of the node's keyspace found it (LB): the
// key's line of waiters (<key>\x1fq, ranked; <key>\x1fx, when each entry
// lapses; <key>\x1fg, the waiters that left for good) or its shared
// holders (<key>\x1fr). Members counts every member, lapsed or not: the
// bounds hold whatever the entries' lapse times.
type SetSize struct {
	Node    int
	Key     string // the set's Redis key
	Members int
	At      time.Duration // when the node was read
}

// AddSetSizes records one read of one or more nodes' sets (LB): every set
// found, which may be none. Calling it at all tells Check that the sets
// were read.
func (h *History) AddSetSizes(ss ...SetSize) {
	h.mu.Lock()
	h.sizes = append(h.sizes, ss...)
	h.samples++
	h.mu.Unlock()
}

// setBound returns the bound of the set whose Redis key is key, and what
// the set is, by its suffix; ok false for a key that is no such set.
func setBound(key string, cfg Config) (bound int, what string, ok bool) {
	switch {
	case strings.HasSuffix(key, node.LineSuffix), strings.HasSuffix(key, node.LapseSuffix):
		return cfg.LineMax, "line of waiters", true
	case strings.HasSuffix(key, node.LeftSuffix):
		return cfg.LineMax, "set of waiters that left for good", true
	case strings.HasSuffix(key, node.HoldersSuffix):
		return cfg.SharedMax, "set of shared holders", true
	}
	return 0, "", false
}

// checkLB: no set read (AddSetSizes) holds more members than its bound
// (Config.LineMax for a key's line and the waiters that left it,
// Config.SharedMax for its shared holders): the nodes keep them bounded
// whatever the key's history, so that no script call costs more than the
// bounds allow. One violation per set and node, at its largest.
func checkLB(s snapshot, cfg Config, r *Report) {
	switch {
	case cfg.LineMax <= 0 && cfg.SharedMax <= 0:
		r.Skipped[LB] = "no bound given (Config.LineMax, Config.SharedMax)"
		return
	case s.samples == 0:
		r.Skipped[LB] = "the nodes' sets were never read (AddSetSizes)"
		return
	}
	worst := map[string]SetSize{} // by node and key
	var order []string
	for _, z := range s.sizes {
		bound, _, ok := setBound(z.Key, cfg)
		if !ok || bound <= 0 {
			continue
		}
		r.Checked[LB]++
		k := fmt.Sprintf("%d\x00%s", z.Node, z.Key)
		if w, seen := worst[k]; z.Members > bound && (!seen || z.Members > w.Members) {
			if !seen {
				order = append(order, k)
			}
			worst[k] = z
		}
	}
	for _, k := range order {
		z := worst[k]
		bound, what, _ := setBound(z.Key, cfg)
		r.add(LB, z.Key, "node%d's %s (%q) held %d members at %v, more than its bound %d", z.Node, what, z.Key, z.Members, us(z.At), bound)
	}
}
