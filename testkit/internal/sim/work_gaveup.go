package sim

import "time"

// gaveUpPart is a client's part in a gave-up schedule (calm: no fault):
// clients 0 and 1 are readers that hold the hot key shared, auto-extended,
// two to three TTLs at a time, back to back and out of phase, so that a
// reader holds it nearly always; every other client is a writer that,
// s.ops times, waits for the key with Lock for a tenth to half a TTL, gives
// up (a reader holds it), and at once asks for it shared with TryLock,
// which must be let in (LV): its Lock call left the line before it
// returned. A leave that later commands overtake (the defect of
// quorumlock_bug_leavelate) has it refused.
func (w *worker) gaveUpPart() {
	ttl := w.s.ttl
	if w.id < 2 {
		time.Sleep(time.Duration(w.id)*ttl*3/2 + w.upTo(ttl/10))
		w.until(time.Duration(w.s.ops+2)*ttl*3/2, func() time.Duration { return time.Microsecond }, func() {
			w.holdShared(hotKey, 2*ttl, w.between(2*ttl, 3*ttl))
		})
		return
	}
	time.Sleep(w.between(ttl*3/2, 2*ttl))
	for range w.s.ops {
		if !w.lockFor(hotKey, w.between(ttl/10, ttl/2), w.upTo(ttl/4), false) {
			w.holdShared(hotKey, 0, w.between(ttl/4, ttl/2))
		}
		time.Sleep(w.between(ttl/4, ttl/2))
	}
}
