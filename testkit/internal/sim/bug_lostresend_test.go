//go:build quorumlock_bug_lostresend

package sim

import "testing"

// TestFindsBugLostResend runs with -tags quorumlock_bug_lostresend, which
// puts back a defect in the library (internal/bugs): a session lock whose
// key a loss's background release, or a late answer's, already deletes is
// deleted there again, by the loss's release and the Release round both
// when Release finds the lock lost, and by the Release round after a loss.
// The search plays late-drop schedules (session locks, yes that come
// late, a client standing still past its locks' validity) from seed 1 and
// requires an RD violation within 1,000 of them; it logs the first seed
// that has one. The mixed schedules found it first, at seed 23343.
func TestFindsBugLostResend(t *testing.T) {
	findListed(t, "quorumlock_bug_lostresend", "RD", workControl(lateDrop), 1000, func(o outcome) []string { return o.rd })
}
