// Package stall measures how long this process stood still: the time in
// which a goroutine that asks to wake every Pulse could not run (the process
// starved of CPU by the kernel or a CPU quota, a long stop of the world, a
// VM paused). Waits for another process, such as a Redis server's reply,
// add what the process stood still to their bounds, so that a wait is never
// judged over only because this process could not look (docs/design.md,
// "Starved processes").
//
// The clock ticks only while it has users (Hold), and its goroutine exits
// Linger after the last one leaves. Safe for concurrent use; Now takes no
// lock.
package stall

import (
	"sync/atomic"
	"time"
)

const (
	// Pulse is how often the clock's goroutine asks to wake.
	Pulse = 5 * time.Millisecond
	// Slack is how late a wake may be and still count as on time: a
	// busy process wakes a little late without standing still.
	Slack = Pulse
	// Linger is how long the goroutine outlives its last user.
	Linger = 100 * time.Millisecond
	// MaxCredit bounds what one wait may add to its bound, whatever the
	// process went through: a wait for a server that is really gone
	// ends at most this much later than its bound.
	MaxCredit = time.Minute
	// Recover is the most a wait gets on top of the stand-still it
	// spanned. When a stand-still ends, the process (and the goroutines
	// it shares the CPU with, a test's in-process proxies included) runs
	// the backlog of everything that fell due meanwhile, all at once, so
	// a wait that had little time left when the stand-still began would
	// end for the stand-still's sake, its reply a few milliseconds away
	// (the chaos suite's 2.5–4 s stops: up to 124 ms). A wait that
	// spanned a stand-still of s gets min(s, Recover) more.
	Recover = 250 * time.Millisecond
)

// reading is what the goroutine last saw, swapped whole so that Now reads
// it without a lock.
type reading struct {
	running bool
	last    time.Time     // the goroutine's last wake, or its start
	stalled time.Duration // stood still so far, up to last
}

// clock is the process' one stall clock. Hold and Done take no lock: a
// goroutine that holds a lock when the kernel takes the CPU away would
// hold up every other one until the process runs again, which is what a
// starved process can least afford.
type clock struct {
	now  atomic.Pointer[reading] // written only by the goroutine that owns running
	seen atomic.Int64            // the most Now has returned: it never returns less

	users   atomic.Int64
	idle    atomic.Int64 // UnixNano when users last dropped to 0
	running atomic.Bool  // a goroutine owns the clock
	frozen  atomic.Int64 // Freeze: UnixNano before which the goroutine does not run
}

var c = func() *clock {
	c := &clock{}
	c.now.Store(&reading{})
	return c
}()

// Hold counts a user of the clock and starts its goroutine if it is not
// running; each Hold must be followed by one Done.
func Hold() {
	c.users.Add(1)
	c.start()
}

// start makes this goroutine the clock's owner, if none is, and runs the
// clock on a new goroutine.
func (c *clock) start() {
	if c.running.Load() || !c.running.CompareAndSwap(false, true) {
		return
	}
	r := c.now.Load()
	c.now.Store(&reading{running: true, last: time.Now(), stalled: r.stalled})
	go c.run()
}

// Done ends a Hold.
func Done() {
	if c.users.Add(-1) == 0 {
		c.idle.Store(time.Now().UnixNano())
	}
}

// Now returns how long the process has stood still so far, while the
// clock has run: a total that only grows. It counts a stand-still still
// under way (the goroutine has not woken yet) up to now. Only differences
// of Now taken within one Hold mean anything.
func Now() time.Duration {
	n := int64(c.now.Load().at(time.Now()))
	for { // a reading swapped since it was loaded can count up to Slack less
		seen := c.seen.Load()
		if n <= seen {
			return time.Duration(seen)
		}
		if c.seen.CompareAndSwap(seen, n) {
			return time.Duration(n)
		}
	}
}

// at is how long the process had stood still by now.
func (r *reading) at(now time.Time) time.Duration {
	if !r.running {
		return r.stalled
	}
	return r.stalled + late(now.Sub(r.last))
}

// late is how much of a gap between two wakes the process stood still.
func late(gap time.Duration) time.Duration { return max(0, gap-Pulse-Slack) }

// Since returns what a wait that began at mark (a value of Now) gets on
// top of its bound: how long the process stood still since, s, and
// min(s, Recover) to catch up after it; at most MaxCredit.
func Since(mark time.Duration) time.Duration {
	s := max(Now()-mark, 0)
	return min(s+min(s, Recover), MaxCredit)
}

// Extend returns deadline moved later by what the process stood still
// since mark: the deadline a wait that began at mark should keep.
func Extend(deadline time.Time, mark time.Duration) time.Time {
	return deadline.Add(Since(mark))
}

func (c *clock) run() {
	t := time.NewTicker(Pulse)
	defer t.Stop()
	for now := range t.C {
		if d := time.Until(time.Unix(0, c.frozen.Load())); d > 0 { // Freeze: held off the CPU
			time.Sleep(d)
			now = time.Now()
		}
		stop := c.users.Load() == 0 && now.Sub(time.Unix(0, c.idle.Load())) >= Linger
		c.now.Store(&reading{running: !stop, last: now, stalled: c.now.Load().at(now)})
		if !stop {
			continue
		}
		c.running.Store(false)
		// A Hold that came after the users were read saw the clock still
		// running: start again for it, unless another goroutine has.
		if c.users.Load() == 0 || !c.running.CompareAndSwap(false, true) {
			return
		}
		c.now.Store(&reading{running: true, last: time.Now(), stalled: c.now.Load().stalled})
	}
}

// Freeze makes the clock's goroutine stand still for d from now, as the
// whole process would when starved: for tests that hold other goroutines
// off the CPU as long (a connection's reader) and check what a stand-still
// does to them. It needs a Hold to be in force.
func Freeze(d time.Duration) {
	c.frozen.Store(time.Now().Add(d).UnixNano())
}
