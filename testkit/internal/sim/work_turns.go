package sim

import (
	"fmt"
	"time"
)

// turnsPart is a client's part in a turns schedule (calm): two or three
// clients take turns on the hot key, each asking again with Lock right
// after it released, as processes contending for a lock do (and as
// redlock's TestNoLostWakeUp does on real Redis). Their Clients poll only
// every turnsPoll (WithRetryBackoff), so that every turn must come from a
// wake-up: a release hands the key to the waiter first in the line and
// wakes it, and a split of the nodes' votes has the waiters retry within
// the hand-off grace. WK (no lost wake-up): no Lock call lasts half a
// poll, the shortest sleep that nothing cut short; the key is never held
// longer than an eighth of a TTL, and the links deliver every command and
// message.
func (w *worker) turnsPart() {
	poll := w.s.turnsPoll()
	time.Sleep(w.upTo(w.s.ttl / 8))
	for turn := range w.s.ops {
		start := time.Now()
		l, _, err := w.rec.Acquire(w.ctx, hotKey, 3*poll)
		took := time.Since(start)
		w.trace("%s turn %d: acquire %q took %v: %v", w.name, turn, hotKey, took, errOf(err))
		if took >= poll/2 {
			w.wk.add(fmt.Sprintf("WK: %s's Lock of %q (turn %d) began at %v and took %v, at least half the poll of %v: a sleep nothing cut short (%v)",
				w.name, hotKey, turn, start.Sub(w.t0), took, poll, errOf(err)))
		}
		if l == nil {
			continue
		}
		w.holdFor(l, false, w.upTo(w.s.ttl/8))
	}
}

// turnsPoll is how often the waiters of a turns schedule poll: long
// against everything a turn waits for (holds of an eighth of a TTL, calm
// links, rounds bounded by the node timeout).
func (s schedule) turnsPoll() time.Duration { return 40 * s.ttl }

// wkLog collects WK's violations; safe for concurrent use.
type wkLog struct{ collected[string] }
