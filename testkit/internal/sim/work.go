package sim

import (
	"fmt"
	"time"

	"github.com/quorumlock/quorumlock/redlock"
)

// play is the client's part in its schedule's aimed workload (s.work).
func (w *worker) play() {
	switch w.s.work {
	case crowd:
		w.crowdPart()
	case readers:
		w.readersPart()
	case rawResume:
		w.rawResumePart()
	case gaveUp:
		w.gaveUpPart()
	case lateDrop:
		w.lateDropPart()
	case stallWork:
		w.stallPart()
	case turns:
		w.turnsPart()
	default:
		w.tr.fail("%s: no such workload %q", w.name, w.s.work)
	}
}

// between is a random duration in [lo, hi).
func (w *worker) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(w.r.Int64N(int64(max(hi-lo, 1))))
}

// holdShared takes key as one of its shared holders, waiting up to wait
// (0: TryLock), recorded as a shared acquire whatever its outcome
// (Recorder.AcquireShared), auto-extended; it holds the lock for about
// hold and releases it. It reports whether it got the lock.
func (w *worker) holdShared(key string, wait, hold time.Duration) bool {
	opts := []redlock.Option{redlock.WithFencing(false), redlock.WithAutoExtend(true)}
	l, _, err := w.rec.AcquireShared(w.ctx, key, wait, opts...)
	w.trace("%s acquire shared %q (wait %v, hold %v): %v", w.name, key, wait, hold, errOf(err))
	w.sharedTried++
	if l == nil {
		return false
	}
	w.sharedHeld++
	w.holdFor(l, true, hold)
	return true
}

// lockFor takes key alone, waiting up to wait (0: TryLock), auto-extended
// when auto (as every lock of a schedule of sessions is), holds it for
// about hold and releases it; it reports whether it got the lock.
func (w *worker) lockFor(key string, wait, hold time.Duration, auto bool) bool {
	var opts []redlock.Option
	if auto && !w.s.sessions {
		opts = append(opts, redlock.WithAutoExtend(true))
	}
	l, _, err := w.rec.Acquire(w.ctx, key, wait, opts...)
	w.trace("%s acquire %q (wait %v, hold %v): %v", w.name, key, wait, hold, errOf(err))
	if l == nil {
		return false
	}
	w.holdFor(l, auto || w.s.sessions, hold)
	return true
}

// holdFor uses l for about d (critical sections that end before its
// deadline, which is read, and recorded when it moves by itself, before
// each), then releases it. auto says l is auto-extended.
func (w *worker) holdFor(l *redlock.Lock, auto bool, d time.Duration) {
	if auto && !w.s.sessions {
		if w.auto == nil {
			w.auto = map[*redlock.Lock]bool{}
		}
		w.auto[l] = true
		defer delete(w.auto, l)
	}
	end := time.Now().Add(d)
	for time.Until(end) > 0 && l.Err() == nil {
		w.section(l)
		time.Sleep(min(w.upTo(w.s.ttl/4), max(time.Until(end), time.Microsecond)))
	}
	w.release(l)
}

// until runs f, then sleeps pause(), over and over until d has passed
// since it was called (the last f may end later).
func (w *worker) until(d time.Duration, pause func() time.Duration, f func()) {
	end := time.Now().Add(d)
	for time.Until(end) > 0 {
		f()
		time.Sleep(pause())
	}
}

// hotKey is the key the aimed workloads contend for.
const hotKey = "k0"

// anchorKey is the key client id holds through a late-drop schedule.
func anchorKey(id int) string { return fmt.Sprintf("a%d", id) }
