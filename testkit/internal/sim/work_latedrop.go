package sim

import "time"

// lateDropPart is a client's part in a late-drop schedule (session locks;
// slow commands, so that yes come after their round was decided; stretches
// in which background releases fail unwritten, schedule.bgCuts): it holds
// a key of its own (anchorKey) for the whole workload, so that its renewal
// session lives and every session lock key it leaves behind stays held,
// and meanwhile contends s.ops times for the two shared keys (TryLock, or
// Lock waiting up to a TTL), holding what it gets briefly. A release owed
// for a late yes, a lost lock or a late yes after Release whose send fails
// unwritten must be sent again: dropped (the defect of
// quorumlock_bug_latedrop), its key stays held while the session lives,
// and the sweeps find it past the clean-up bound (L2).
func (w *worker) lateDropPart() {
	ttl := w.s.ttl
	time.Sleep(w.upTo(ttl / 4))
	anchor, _, err := w.rec.Acquire(w.ctx, anchorKey(w.id), 2*ttl)
	w.trace("%s acquire anchor %q: %v", w.name, anchorKey(w.id), errOf(err))
	for range w.s.ops {
		key := w.key()
		wait := []time.Duration{0, ttl}[w.r.IntN(2)]
		w.lockFor(key, wait, w.upTo(ttl/2), true)
		if anchor != nil {
			w.deadline(anchor) // its holder reads its deadline (a session lock's lease)
		}
		time.Sleep(w.upTo(ttl / 3))
	}
	if anchor != nil {
		w.release(anchor)
	}
}
