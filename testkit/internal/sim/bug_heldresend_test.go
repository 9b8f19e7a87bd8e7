//go:build quorumlock_bug_heldresend

package sim

import (
	"testing"
	"time"
)

// TestFindsBugHeldResend runs with -tags quorumlock_bug_heldresend, which
// puts back a defect in the library (internal/bugs): a Release that ends
// before a node's SET answered counts its held-back delete, never sent, as
// a delete of unknown fate, and every failed delete of a Release is re-sent
// while it finds nothing, for TTL + the cleanup budget, although the late
// yes's own delete has cleared the node. The search plays the default
// mixture from seed 1 and requires an RD violation within 300 schedules;
// it logs the first seed that has one.
func TestFindsBugHeldResend(t *testing.T) {
	start := time.Now()
	var first uint64
	var what string
	found, played := sweep(t, 1, 300, none, func(seed uint64, o outcome) bool {
		if len(o.rd) > 0 && (first == 0 || seed < first) {
			first, what = seed, violationLines(o.rd)
		}
		return first != 0
	})
	if first == 0 {
		t.Fatalf("no RD violation in %d schedules (%d violated otherwise) with -tags quorumlock_bug_heldresend", played, found)
	}
	t.Logf("-tags quorumlock_bug_heldresend: RD found at seed %d, within %d schedules (%v; replay with the tag: %s):\n%s",
		first, played, time.Since(start).Round(time.Millisecond), replayLine(first, none), what)
}
