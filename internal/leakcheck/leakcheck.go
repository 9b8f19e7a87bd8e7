// Package leakcheck is the goroutine-leak check of the test binaries that
// talk to real Redis servers.
//
// One go-redis goroutine needs time rather than an exception: after PoolSize
// failed dials to a dead node, a pool starts a probe
// (internal/pool.(*ConnPool).tryDial) that redials once a second and exits at
// its next turn after the pool is closed, so up to a second after the last
// test closed it. Run waits (bounded) for those probes to end, then runs the
// leak check with no goroutine ignored: a probe of a pool that was never
// closed is still reported.
package leakcheck

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// Run runs the tests and, when they passed, the leak check; it returns the
// exit code for os.Exit: non-zero when a test failed or goroutines were left
// behind (listed on standard error). It is meant to be called once, from
// TestMain.
func Run(m *testing.M) int {
	code := m.Run()
	if code == 0 {
		waitFor("(*ConnPool).tryDial", 5*time.Second)
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: goroutines left behind after the tests: %v\n", err)
			code = 1
		}
	}
	return code
}

// waitFor waits until no goroutine has fn in its stack, at most bound.
func waitFor(fn string, bound time.Duration) {
	buf := make([]byte, 1<<20)
	for end := time.Now().Add(bound); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		n := runtime.Stack(buf, true)
		if !bytes.Contains(buf[:n], []byte(fn)) {
			return
		}
	}
}
