//go:build quorumlock_bug_resumemark

package sim

import (
	"testing"

	"github.com/quorumlock/quorumlock/testkit/history"
)

// TestFindsBugResumeMark runs with -tags quorumlock_bug_resumemark, which
// puts back a defect in the library (internal/bugs): Resume given a shared
// key's value (0x1c and a token, read raw from a node) returns a lock held
// alone beside the key's shared holders: two holders (S1). The search plays
// raw-resume schedules. It requires a violation within 3000 schedules from
// seed 1 (findRestored).
func TestFindsBugResumeMark(t *testing.T) {
	findRestored(t, "quorumlock_bug_resumemark", rawResume, 3000, history.S1)
}
