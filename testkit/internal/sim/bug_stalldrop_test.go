//go:build quorumlock_bug_stalldrop

package sim

import (
	"testing"
	"time"
)

// TestFindsBugStallDrop runs with -tags quorumlock_bug_stalldrop, which puts
// back a defect in the simulator's model of a stalled process, not in the
// library (stalldrop_bug.go): a reply that reaches a client while it stands
// still is dropped instead of delivered at the stall's end. The library then
// learns what its round in flight left on the nodes only when its Pool's
// wait gives up, a follow budget (TTL − node timeout) after the round's
// deadline, moved later by the stall, and its own key stays held until
// then, or until it expires: ST. The search plays stall schedules from
// seed 1 and requires an ST violation within 500 of them; it logs the first
// seed that has one.
func TestFindsBugStallDrop(t *testing.T) {
	c := workControl(stallWork)
	start := time.Now()
	var first uint64
	var what string
	found, played := sweep(t, 1, 500, c, func(seed uint64, o outcome) bool {
		if len(o.st.violations) > 0 && (first == 0 || seed < first) {
			first, what = seed, stLines(o.st)
		}
		return first != 0
	})
	if first == 0 {
		t.Fatalf("no ST violation in %d schedules of the stall workload (%d violated otherwise) with -tags quorumlock_bug_stalldrop", played, found)
	}
	t.Logf("-tags quorumlock_bug_stalldrop: ST found at seed %d, within %d schedules of the stall workload (%v; replay with the tag: %s):\n%s",
		first, played, time.Since(start).Round(time.Millisecond), replayLine(first, c), what)
}
