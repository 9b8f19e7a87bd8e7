package integration

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain fails the run when a test leaves goroutines behind: Clients must
// join their late-reply clean-up in Close, pools and proxies must close.
//
// One go-redis goroutine needs time rather than an exception: after PoolSize
// failed dials to a dead node, a pool starts a probe
// (internal/pool.(*ConnPool).tryDial) that redials once a second and exits at
// its next turn after the pool is closed, so up to a second after the last
// test closed it. TestMain waits (bounded) for those probes to end, then
// runs the leak check with no goroutine ignored: a probe of a pool that was
// never closed is still reported.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		waitFor("(*ConnPool).tryDial", 5*time.Second)
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: goroutines left behind after the tests: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
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
