package sim

import (
	"fmt"
	"strings"
	"sync"
	"time"
)

// tracer keeps a schedule's readable trace, when on: who sent what, when it
// landed, what it did, and the faults, each line stamped with the virtual
// time since the start. Failures of the simulator itself (a script error)
// are kept whether it is on or not.
type tracer struct {
	on bool
	t0 time.Time

	mu    sync.Mutex
	lines []string
	fails []string
}

func (t *tracer) add(format string, args ...any) {
	if !t.on {
		return
	}
	line := fmt.Sprintf("%10.3fms  ", float64(time.Since(t.t0))/1e6) + fmt.Sprintf(format, args...)
	t.mu.Lock()
	t.lines = append(t.lines, line)
	t.mu.Unlock()
}

func (t *tracer) fail(format string, args ...any) {
	t.mu.Lock()
	t.fails = append(t.fails, fmt.Sprintf(format, args...))
	t.mu.Unlock()
	t.add("SIMULATOR FAILURE: "+format, args...)
}

func (t *tracer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(t.lines, "\n")
}

func (t *tracer) failures() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.fails...)
}
