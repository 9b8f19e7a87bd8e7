//go:build quorumlock_bug_splitonce

package sim

import "testing"

// TestFindsBugSplitOnce runs with -tags quorumlock_bug_splitonce, which puts
// back a defect in the library (internal/bugs): a waiter whose attempt split
// the nodes' votes retries within the hand-off grace only once per retry
// max. Waiters that split are in the line only on the nodes that told them
// "taken", so a third Client's releases hand the key to each of them on too
// few nodes to wake either, and they sleep out their poll (WK). The search
// plays turns schedules from seed 1 and requires a WK violation within 300
// of them; it logs the first seed that has one.
func TestFindsBugSplitOnce(t *testing.T) {
	findListed(t, "quorumlock_bug_splitonce", "WK", workControl(turns), 300, func(o outcome) []string { return o.wk })
}
