package sim

import "time"

// readersPart is a client's part in a readers schedule: client 0 is a
// writer, which waits for the hot key with Lock (up to 8 TTLs) two or three
// times; the others are readers, which take the key shared (TryLock, or
// Lock waiting up to half a TTL) and hold it for one to four TTLs,
// auto-extended, one after the other for s.ops TTLs, so that the key is
// seldom free. Writers first (WF): once the writer is in the key's line,
// the readers of the moment drain and no new one is let in; a line that
// lapsed while its writer polled (the defect of quorumlock_bug_linelapse)
// lets them in.
func (w *worker) readersPart() {
	ttl := w.s.ttl
	if w.id == 0 {
		time.Sleep(w.between(ttl/2, ttl))
		for range 2 + w.r.IntN(2) {
			w.lockFor(hotKey, 8*ttl, w.upTo(ttl/2), false)
			time.Sleep(w.between(ttl/2, ttl))
		}
		return
	}
	time.Sleep(w.upTo(ttl / 3))
	w.until(time.Duration(w.s.ops)*ttl, func() time.Duration { return w.upTo(ttl / 4) }, func() {
		wait := []time.Duration{0, ttl / 2}[w.r.IntN(2)]
		w.holdShared(hotKey, wait, w.between(ttl, 4*ttl))
	})
}
