//go:build quorumlock_bug_linelapse

package sim

import (
	"testing"

	"github.com/quorumlock/quorumlock/testkit/history"
)

// TestFindsBugLineLapse runs with -tags quorumlock_bug_linelapse, which puts
// back a defect in the library (internal/bugs): a join renews the line's TTL
// only when it adds a waiter, so the line lapses while its writer still
// polls, and readers are let in ahead of it (WF). The search plays readers
// schedules. It requires a violation within 3000 schedules from seed 1
// (findRestored).
func TestFindsBugLineLapse(t *testing.T) {
	findRestored(t, "quorumlock_bug_linelapse", readers, 3000, history.WF)
}
