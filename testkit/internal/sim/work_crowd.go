package sim

import (
	"time"

	"github.com/quorumlock/quorumlock/redlock"
)

// crowdFixed is the number of clients of a crowd schedule that are not
// members of the crowd: the holder, two waiters of a lock of several keys
// and two of a semaphore.
const crowdFixed = 5

// crowdPart is a client's part in a crowd schedule: client 0 holds the hot
// key alone, auto-extended, for three to five TTLs, twice; clients 1 and 2
// wait (LockAll, up to one or two TTLs) for it together with the other key,
// and clients 3 and 4 for the one permit of a semaphore named after it,
// s.ops times each; every other client is a member of the crowd: s.ops
// times, in half of the seeds a short Lock call of the hot key (a tenth to
// a third of a TTL: it joins the key's line and gives up), in the other
// half a shared holder of it (TryLock, or Lock waiting up to a third of a
// TTL, held half a TTL to two). The key's line and its shared holders grow
// to their bounds (LB); a line that nothing bounds (the defect of
// quorumlock_bug_linegrowth) grows past them.
func (w *worker) crowdPart() {
	ttl := w.s.ttl
	switch {
	case w.id == 0:
		for range 2 {
			w.lockFor(hotKey, 2*ttl, w.between(3*ttl, 5*ttl), true)
			time.Sleep(w.between(ttl/4, ttl/2))
		}
	case w.id < 3:
		w.crowdAll()
	case w.id < crowdFixed:
		w.crowdPermit()
	case w.s.seed%2 == 0:
		time.Sleep(w.upTo(ttl / 2))
		for range w.s.ops {
			w.lockFor(hotKey, w.between(ttl/10, ttl/3), w.upTo(ttl/4), false)
			time.Sleep(w.between(ttl/10, ttl/3))
		}
	default:
		time.Sleep(w.upTo(ttl / 2))
		for range w.s.ops {
			w.holdShared(hotKey, []time.Duration{0, ttl / 3}[w.r.IntN(2)], w.between(ttl/2, 2*ttl))
			time.Sleep(w.between(ttl/10, ttl/3))
		}
	}
}

// crowdAll waits s.ops times for the hot key and the other one together
// (LockAll), holding them briefly when it gets them.
func (w *worker) crowdAll() {
	ttl := w.s.ttl
	keys := []string{hotKey, "k1"}
	for range w.s.ops {
		time.Sleep(w.upTo(ttl / 2))
		l, _, err := w.rec.AcquireAll(w.ctx, keys, w.between(ttl, 2*ttl))
		w.trace("%s acquire all %q: %v", w.name, keys, errOf(err))
		w.count(err)
		if l != nil {
			w.holdFor(l, w.s.sessions, w.upTo(ttl/4))
		}
	}
}

// crowdPermit waits s.ops times for the permit of a semaphore of one
// permit named after the hot key, holding it briefly when it gets it.
func (w *worker) crowdPermit() {
	ttl := w.s.ttl
	for range w.s.ops {
		time.Sleep(w.upTo(ttl / 2))
		s, err := w.c.Semaphore(hotKey, 1, redlock.WithFencing(false), redlock.WithMaxWait(w.between(ttl, 2*ttl)))
		if err != nil {
			w.tr.fail("%s: Semaphore(%q, 1): %v", w.name, hotKey, err)
			return
		}
		l, _, err := w.rec.Permit(w.ctx, s, true)
		w.trace("%s acquire the permit of %q: %v", w.name, hotKey, errOf(err))
		w.permitTried++
		if l != nil {
			w.permitHeld++
			w.holdFor(l, w.s.sessions, w.upTo(ttl/4))
		}
	}
}
