//go:build quorumlock_bug_latedrop

package sim

import (
	"testing"

	"github.com/quorumlock/quorumlock/testkit/history"
)

// TestFindsBugLateDrop runs with -tags quorumlock_bug_latedrop, which puts
// back a defect in the library (internal/bugs): a release owed for a yes
// that came after its round was decided (or for a lost lock, or after
// Release) is not sent again when its send fails unwritten, so a session
// lock's key stays held while its session lives (L2). The search plays
// late-drop schedules. It requires a violation within 5000 schedules from
// seed 1 (findRestored).
func TestFindsBugLateDrop(t *testing.T) {
	findRestored(t, "quorumlock_bug_latedrop", lateDrop, 5000, history.L2)
}
