package sim

import (
	"regexp"
	"strconv"
	"strings"
	"time"

	lua "github.com/yuin/gopher-lua"

	"github.com/quorumlock/quorumlock/testkit/history"
)

// The bounds the library's scripts keep on the sets beside a lock key
// (lib.lua: LINE_MAX for each of a key's line sets, SHARED_MAX for its
// shared holders), as lib.lua states them; 0 when it states none.
var (
	libLineMax   = libConst("LINE_MAX")
	libSharedMax = libConst("SHARED_MAX")
)

// The bounds the schedules' nodes keep instead: low enough for a workload
// of a few hundred waiters and readers to reach them (waiters.go), so that
// the simulator sees what the nodes do at their bounds, and LB checks them.
const (
	simLineMax   = 32
	simSharedMax = 32
)

// libConst reads lib.lua's top-level "local NAME = <integer>", 0 when
// absent.
func libConst(name string) int {
	m := regexp.MustCompile(`(?m)^local ` + name + ` = (\d+)$`).FindStringSubmatch(lib)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// bound makes the engine's scripts keep lineMax and sharedMax (lib.lua's
// LINE_MAX and SHARED_MAX, globals of the engine's state: see libGlobals);
// a bound lib.lua does not state is left alone.
func (e *engine) bound(lineMax, sharedMax int) {
	if libLineMax > 0 {
		e.L.SetGlobal("LINE_MAX", lua.LNumber(lineMax))
	}
	if libSharedMax > 0 {
		e.L.SetGlobal("SHARED_MAX", lua.LNumber(sharedMax))
	}
}

// bounded reports whether the schedules' nodes keep bounds (the library's
// lib.lua states them); LB judges against simLineMax and simSharedMax then.
func bounded() bool { return libLineMax > 0 && libSharedMax > 0 }

// setSizes reads the sizes of the node's sorted sets beside the lock keys
// under prefix (a key's line, its waiters that left, its shared holders),
// for LB, stamped at.
func (n *simNode) setSizes(prefix string, at time.Duration) []history.SetSize {
	n.lock()
	defer n.unlock()
	now := n.now()
	var out []history.SetSize
	for k := range n.st.keys {
		if !strings.HasPrefix(k, prefix) || len(k) < 2 || k[len(k)-2] != '\x1f' {
			continue
		}
		if v := n.st.live(k, now); v != nil && v.zset != nil {
			out = append(out, history.SetSize{Node: n.id, Key: k, Members: len(v.zset), At: at})
		}
	}
	return out
}
