//go:build quorumlock_bug_linegrowth

package sim

import (
	"testing"

	"github.com/quorumlock/quorumlock/testkit/history"
)

// TestFindsBugLineGrowth runs with -tags quorumlock_bug_linegrowth, which
// puts back a defect in the library (internal/bugs): joining and leaving a
// line drop no lapsed entry and nothing bounds it: a key's line, and the set
// of the waiters that left it, outgrow their bounds (LB), and a release that
// drops their lapsed entries in one call may fail (ERR). The search plays
// crowd schedules. It requires a violation within 1000 schedules from seed 1
// (findRestored).
func TestFindsBugLineGrowth(t *testing.T) {
	findRestored(t, "quorumlock_bug_linegrowth", crowd, 1000, history.LB, history.ERR)
}
