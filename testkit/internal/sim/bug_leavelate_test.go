//go:build quorumlock_bug_leavelate

package sim

import (
	"testing"

	"github.com/quorumlock/quorumlock/testkit/history"
)

// TestFindsBugLeaveLate runs with -tags quorumlock_bug_leavelate, which puts
// back a defect in the library (internal/bugs): a Lock call that gives up
// leaves the line in the background, and its Client's next command, a shared
// TryLock, overtakes the leave and is refused on a key that only readers
// hold (LV). The search plays gave-up schedules. It requires a violation
// within 3000 schedules from seed 1 (findRestored).
func TestFindsBugLeaveLate(t *testing.T) {
	findRestored(t, "quorumlock_bug_leavelate", gaveUp, 3000, history.LV)
}
