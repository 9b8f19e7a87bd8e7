package sim

import (
	"fmt"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/node"
)

// TestLoweredBounds: a node whose engine keeps lower bounds (bound) gives
// a key's line no more waiters, and the key no more shared holders, than
// those, as setSizes reads them; the library's own bounds are lib.lua's.
func TestLoweredBounds(t *testing.T) {
	if !bounded() {
		t.Skip("lib.lua states no bounds")
	}
	if libLineMax < 100 || libSharedMax < 100 {
		t.Fatalf("lib.lua's bounds read as %d and %d", libLineMax, libSharedMax)
	}
	n := newNode(0, 1, time.Now(), &tracer{})
	defer n.eng.release()
	n.eng.bound(3, 2)
	run := func(op node.Op) node.Result {
		n.lock()
		defer n.unlock()
		return n.execLocked(node.New(op))
	}
	if r := run(node.Op{Kind: node.Acquire, Key: "quorumlock:{k}", Token: "h", TTL: time.Minute}); r.Int != 1 {
		t.Fatalf("the holder's acquire answered %+v", r)
	}
	for i := range 6 {
		w := fmt.Sprintf("c.%d", i)
		run(node.Op{Kind: node.Acquire, Key: "quorumlock:{k}", Token: "t" + w, TTL: time.Minute, Waiter: w, Rank: int64(i), LineTTL: time.Minute})
	}
	for i := range 4 {
		run(node.Op{Kind: node.AcquireShared, Key: "quorumlock:{s}", Token: fmt.Sprintf("r%d", i), TTL: time.Minute})
	}
	got := map[string]int{}
	for _, z := range n.setSizes("quorumlock:", 0) {
		got[z.Key] = z.Members
	}
	want := map[string]int{"quorumlock:{k}\x1fq": 3, "quorumlock:{k}\x1fx": 3, "quorumlock:{s}\x1fr": 2}
	for k, m := range want {
		if got[k] != m {
			t.Errorf("%q holds %d members, want %d (all sets: %v)", k, got[k], m, got)
		}
	}
}
