package sim

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/quorumlock/quorumlock/redlock"
)

// ownKey is the key only client id takes in a stall schedule: no other
// Client holds it or asks for it, so when client id asks for it, it is
// free but for what client id itself left on the nodes.
func ownKey(id int) string { return fmt.Sprintf("own%d", id) }

// drawWorkStalls draws the stalls of a stall schedule: one or two per
// client, the first within 3 TTLs of the start, each later one after the
// last has been probed (stProbeSpan) and its key put in a state again.
func drawWorkStalls(r *rand.Rand, s schedule) []clientStall {
	var out []clientStall
	for c := range s.clients {
		at := s.ttl + time.Duration(r.Int64N(int64(2*s.ttl)))
		for range 1 + r.IntN(2) {
			st := drawStall(r, c, at)
			out = append(out, st)
			at = st.end() + s.stProbeSpan() + time.Duration(r.Int64N(int64(s.ttl)))
		}
	}
	return out
}

// stProbeSpan is how long a client's own key is busy after one of its
// stalls ends: its probe (at most twice ST's bound), the lock held and
// released, and the next state set up (up to a TTL before the next stall).
func (s schedule) stProbeSpan() time.Duration { return 2*s.stBound() + 2*s.ttl }

// stallPart is a client's part in a stall schedule: s.ops operations of
// the mixed workload on the shared keys (holds, Do, locks of several keys,
// shared holders), none started while its process stands still (wake).
// Its process has a second Client, which owns the client's own key
// (ownKeyPart) and asks for it as each stall ends: a Client of its own, so
// that the Recorder tells the tokens of its rounds from the first one's.
func (w *worker) stallPart() {
	time.Sleep(w.upTo(w.s.ttl / 4))
	for range w.s.ops {
		w.wake()
		w.mixedStep()
		time.Sleep(w.upTo(w.s.ttl / 2))
	}
}

// ownKeyPart puts the client's own key in a drawn state as each of its
// stalls begins (stallState), stands still until the stall ends, then
// releases the lock it held through the stall, if any, and asks for the
// key (probe).
func (w *worker) ownKeyPart() {
	key := ownKey(w.id)
	for _, st := range w.stalls {
		l, state := w.stallState(key, st)
		w.trace("%s: own key %q %s as its stall begins", w.name, key, state)
		w.sleepUntil(st.end())
		w.probe(key, st, state, l)
	}
}

// sleepUntil sleeps until at (since the schedule's start).
func (w *worker) sleepUntil(at time.Duration) {
	if d := at - time.Since(w.t0); d > 0 {
		time.Sleep(d)
	}
}

// inFlight is how long before a stall a command is sent that is still on
// its way, or its reply, when the stall begins: on the stall workload's
// quick links a round trip takes about 0.3 ms.
func (w *worker) inFlight() time.Duration { return w.upTo(600 * time.Microsecond) }

// stallState puts key in one of six states as stall st begins and returns
// the lock it holds then (nil when none) and the state's name: free (not
// used since the last probe); held, acquired between a tenth and nine
// tenths of a TTL before (auto-extended in one case in two outside the
// schedules of sessions, whose locks all are); its acquire in flight
// (TryLock sent just before: the round fails during the stall when the
// replies are held, and may have set the key on every node); its release
// in flight; or an extend in flight (Extend with the lock's own TTL: no
// command makes the key live longer than one TTL from when it lands).
func (w *worker) stallState(key string, st clientStall) (*redlock.Lock, string) {
	ttl := w.s.ttl
	switch w.r.IntN(6) {
	case 0:
		return nil, "free"
	case 1, 2:
		w.sleepUntil(st.at - w.between(ttl/10, ttl*9/10))
		auto := w.s.sessions || w.r.IntN(2) == 0
		return w.ownLock(key, auto), fmt.Sprintf("held (auto-extended %v)", auto)
	case 3:
		w.sleepUntil(st.at - w.inFlight())
		return w.ownLock(key, w.s.sessions), "acquire in flight"
	case 4:
		w.sleepUntil(st.at - w.between(ttl/10, ttl/2))
		l := w.ownLock(key, w.s.sessions)
		w.sleepUntil(st.at - w.inFlight())
		if l != nil {
			w.release(l)
		}
		return nil, "release in flight"
	default:
		w.sleepUntil(st.at - w.between(ttl/10, ttl/2))
		l := w.ownLock(key, w.s.sessions)
		w.sleepUntil(st.at - w.inFlight())
		if l != nil {
			_, err := w.rec.Extend(w.ctx, l, ttl)
			w.trace("%s extend %q token %s by %v: %v", w.name, key, short(l.Token()), ttl, errOf(err))
		}
		return l, "extend in flight"
	}
}

// ownLock takes key with TryLock, auto-extended when auto, and returns the
// lock (nil when the attempt failed).
func (w *worker) ownLock(key string, auto bool) *redlock.Lock {
	var opts []redlock.Option
	if auto && !w.s.sessions {
		opts = append(opts, redlock.WithAutoExtend(true))
	}
	l, _, err := w.rec.Acquire(w.ctx, key, 0, opts...)
	w.trace("%s acquire own %q (auto-extended %v): %v", w.name, key, auto, errOf(err))
	if l != nil && auto && !w.s.sessions {
		if w.auto == nil {
			w.auto = map[*redlock.Lock]bool{}
		}
		w.auto[l] = true
	}
	return l
}

// probe is what the client does with its own key once stall st has ended:
// it releases l, the lock it held through the stall (nil: none; it may
// have been lost meanwhile), then asks for the key with Lock, waiting up
// to twice ST's bound, and records the case for ST (stCase); with the
// lock, it runs a critical section and releases it.
func (w *worker) probe(key string, st clientStall, state string, l *redlock.Lock) {
	if l != nil {
		w.release(l)
		delete(w.auto, l)
	}
	c := stCase{client: w.name, key: key, stall: st, state: state, start: time.Since(w.t0), taken: w.takenOn(key)}
	l, _, err := w.rec.Acquire(w.ctx, key, 2*w.s.stBound())
	c.end, c.ok = time.Since(w.t0), l != nil
	if err != nil {
		c.err = err.Error()
	}
	w.trace("%s acquire own %q after its stall (%d nodes held it): %v", w.name, key, c.taken, errOf(err))
	w.probes.add(c)
	if l == nil {
		return
	}
	w.section(l)
	w.release(l)
}

// takenOn counts the nodes on which key holds a value now.
func (w *worker) takenOn(key string) int {
	n := 0
	for _, nd := range w.nodes {
		nd.lock()
		if nd.st.live(redisKey(key), nd.now()) != nil {
			n++
		}
		nd.unlock()
	}
	return n
}
