//go:build quorumlock_bug_stalldrop

package sim

import "testing"

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
	findListed(t, "quorumlock_bug_stalldrop", "ST", workControl(stallWork), 500, func(o outcome) []string { return o.st.violations })
}
