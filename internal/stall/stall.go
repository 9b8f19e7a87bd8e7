// Package stall measures how long this process stood still: the time in
// which a goroutine that asks to wake every Pulse could not run (the process
// starved of CPU by the kernel or a CPU quota, a long stop of the world, a
// VM paused). Waits for another process, such as a Redis server's reply,
// add what the process stood still to their bounds, so that a wait is never
// judged over only because this process could not look (docs/design.md,
// "Starved processes").
//
// The clock ticks only while it has users (Hold), and its goroutine exits
// Linger after the last one leaves. Safe for concurrent use.
package stall

import (
	"sync"
	"time"
)

const (
	// Pulse is how often the clock's goroutine asks to wake.
	Pulse = 10 * time.Millisecond
	// Slack is how late a wake may be and still count as on time: a
	// busy process wakes a little late without standing still.
	Slack = 2 * Pulse
	// Linger is how long the goroutine outlives its last user.
	Linger = 100 * time.Millisecond
	// MaxCredit bounds what one wait may add to its bound, whatever the
	// process went through: a wait for a server that is really gone
	// ends at most this much later than its bound.
	MaxCredit = time.Minute
)

// clock is the process' one stall clock.
type clock struct {
	mu      sync.Mutex
	users   int
	running bool
	last    time.Time     // the goroutine's last wake, or its start
	stalled time.Duration // stood still so far, up to last
	idle    time.Time     // when users last dropped to 0
	frozen  time.Time     // Freeze: the goroutine does not run before this
}

var c clock

// Hold counts a user of the clock and starts its goroutine if it is not
// running; each Hold must be followed by one Done.
func Hold() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.users++
	if c.running {
		return
	}
	c.running, c.last = true, time.Now()
	go c.run()
}

// Done ends a Hold.
func Done() {
	c.mu.Lock()
	c.users--
	if c.users == 0 {
		c.idle = time.Now()
	}
	c.mu.Unlock()
}

// Now returns how long the process has stood still so far, while the
// clock has run: a total that only grows. It counts a stand-still still
// under way (the goroutine has not woken yet) up to now. Only differences
// of Now taken within one Hold mean anything.
func Now() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nowLocked(time.Now())
}

func (c *clock) nowLocked(now time.Time) time.Duration {
	if !c.running {
		return c.stalled
	}
	return c.stalled + late(now.Sub(c.last))
}

// late is how much of a gap between two wakes the process stood still.
func late(gap time.Duration) time.Duration { return max(0, gap-Pulse-Slack) }

// Since returns how long the process stood still since mark (a value of
// Now), at most MaxCredit.
func Since(mark time.Duration) time.Duration { return min(Now()-mark, MaxCredit) }

// Extend returns deadline moved later by what the process stood still
// since mark: the deadline a wait that began at mark should keep.
func Extend(deadline time.Time, mark time.Duration) time.Time {
	return deadline.Add(Since(mark))
}

func (c *clock) run() {
	t := time.NewTicker(Pulse)
	defer t.Stop()
	for now := range t.C {
		c.mu.Lock()
		if d := time.Until(c.frozen); d > 0 { // Freeze: held off the CPU
			c.mu.Unlock()
			time.Sleep(d)
			c.mu.Lock()
			now = time.Now()
		}
		c.stalled = c.nowLocked(now)
		c.last = now
		if c.users == 0 && now.Sub(c.idle) >= Linger {
			c.running = false
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
	}
}

// Freeze makes the clock's goroutine stand still for d from now, as the
// whole process would when starved: for tests that hold other goroutines
// off the CPU as long (a connection's reader) and check what a stand-still
// does to them. It needs a Hold to be in force.
func Freeze(d time.Duration) {
	c.mu.Lock()
	c.frozen = time.Now().Add(d)
	c.mu.Unlock()
}
