//go:build quorumlock_bug_heldresend

package sim

import "testing"

// TestFindsBugHeldResend runs with -tags quorumlock_bug_heldresend, which
// puts back a defect in the library (internal/bugs): a Release that ends
// before a node's SET answered counts its held-back delete, never sent, as
// a delete of unknown fate, and every failed delete of a Release is re-sent
// while it finds nothing, for TTL + the cleanup budget, although the late
// yes's own delete has cleared the node. The search plays the default
// mixture from seed 1 and requires an RD violation within 300 schedules;
// it logs the first seed that has one.
func TestFindsBugHeldResend(t *testing.T) {
	findListed(t, "quorumlock_bug_heldresend", "RD", none, 300, func(o outcome) []string { return o.rd })
}
