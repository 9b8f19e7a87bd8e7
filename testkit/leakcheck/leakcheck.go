// Package leakcheck fails a test binary that leaves goroutines behind, for
// test binaries that talk to real Redis servers through go-redis.
//
// Use it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(leakcheck.Run(m)) }
package leakcheck

import (
	"testing"

	"github.com/quorumlock/quorumlock/internal/leakcheck"
)

// Run runs the tests and, when they passed, checks that no goroutine is
// left behind, allowing a few seconds for go-redis' dial probes of closed
// clients to end (they redial once a second and exit at their next turn).
// It returns the exit code for os.Exit: non-zero when a test failed or a
// goroutine was left (listed on standard error). Call it once, from TestMain.
func Run(m *testing.M) int { return leakcheck.Run(m) }
