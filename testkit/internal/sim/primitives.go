package sim

import (
	"context"
	"fmt"
	"time"

	"github.com/quorumlock/quorumlock/redlock"
)

// semaphores are the counting semaphores the schedules with primitives
// play (schedule.prims), by name, with their numbers of permits: one of a
// single permit (a mutex made of a semaphore) and one of two, whose
// permits are held at once. Their names are not keys of the locks (k0...).
var semaphores = []struct {
	name    string
	permits int
}{{"s1", 1}, {"s2", 2}}

// election is the name of the schedules' election.
const election = "e"

// primitive plays one operation on the semaphores or the election: a
// permit (one in two), a campaign (one in three), else a read of the
// leader.
func (w *worker) primitive() {
	switch x := w.r.IntN(6); {
	case x < 3:
		w.permit()
	case x < 5:
		w.campaign()
	default:
		w.readLeader()
	}
}

// permit takes a permit of one of the semaphores with TryAcquire, or with
// Acquire waiting up to 1 or 2 TTLs (the semaphore's WithMaxWait), and
// holds it like hold's locks (keep): unfenced, auto-extended in the
// schedules of sessions (on its own renewals) and in one in four of the
// others, used with sections and extends, then released, or abandoned to
// its TTL when it is not auto-extended. (Semaphore.Do is not played: the
// Recorder has no record of it; an Acquire, a section and a Release is
// what it does.)
func (w *worker) permit() {
	sem := semaphores[w.r.IntN(len(semaphores))]
	wait := []time.Duration{0, w.s.ttl, 2 * w.s.ttl}[w.r.IntN(3)]
	opts := []redlock.Option{redlock.WithFencing(false)}
	if wait > 0 {
		opts = append(opts, redlock.WithMaxWait(wait))
	}
	auto := w.s.sessions
	if !auto && w.r.IntN(4) == 0 {
		auto, opts = true, append(opts, redlock.WithAutoExtend(true))
	}
	s, err := w.c.Semaphore(sem.name, sem.permits, opts...)
	if err != nil {
		w.tr.fail("%s: Semaphore(%q, %d): %v", w.name, sem.name, sem.permits, err)
		return
	}
	l, _, err := w.rec.Permit(w.ctx, s, wait > 0)
	w.trace("%s acquire a permit of %q (wait %v, auto-extended %v): %v", w.name, sem.name, wait, auto, errOf(err))
	w.permitTried++
	if l == nil {
		return
	}
	w.permitHeld++
	if p := l.Permit(); p < 0 || p >= sem.permits {
		w.tr.fail("%s: a permit of %q (%d permits) says it is permit %d", w.name, sem.name, sem.permits, p)
	}
	w.keep(l, auto, fmt.Sprintf("permit %d of %q", l.Permit(), sem.name))
}

// campaign runs for the election for up to 1/2, 1 or 2 TTLs: one Campaign
// that waits (WithMaxWait of that budget: several rounds under one value,
// and, between them, the reads of the key's TTLs that wake a candidate when
// a dead leader's key frees). A leader reads the leader once (its own value
// and term, by Leader's contract), leads for a while (up to a TTL, then
// uses its lock as hold does: sections, extends) and resigns (Release).
// Its lock is auto-extended: its deadlines are recorded (keep). A read of
// one of its failed rounds is judged by the checker against the leaders
// whose Campaign had returned before it (ELE).
func (w *worker) campaign() {
	wait := []time.Duration{w.s.ttl / 2, w.s.ttl, 2 * w.s.ttl}[w.r.IntN(3)]
	w.lead(w.run1(wait))
}

// run1 is one Campaign, waiting up to wait, with a value of its own; it
// returns the leader's lock, or nil, and the value.
func (w *worker) run1(wait time.Duration) (*redlock.Lock, string) {
	w.campaigns++
	value := fmt.Sprintf("%s#%d", w.name, w.campaigns)
	l, _, err := w.rec.Campaign(w.ctx, election, value, redlock.WithMaxWait(wait))
	w.trace("%s campaign %q as %q (wait %v): %v", w.name, election, value, wait, errOf(err))
	return l, value
}

// lead is a leader's term, l its lock (none when nil): see campaign.
func (w *worker) lead(l *redlock.Lock, value string) {
	if l == nil {
		return
	}
	w.leaders++
	if l.Fence() == 0 {
		w.tr.fail("%s: Campaign %q as %q won with term (fence) 0", w.name, election, value)
	}
	w.readLeader()
	if !w.s.sessions {
		if w.auto == nil {
			w.auto = map[*redlock.Lock]bool{}
		}
		w.auto[l] = true // keep watches it too; its lease starts here
	}
	w.deadline(l)
	time.Sleep(w.upTo(w.s.ttl))
	w.keep(l, true, fmt.Sprintf("leader %q term %d", value, l.Fence()))
}

// readLeader reads the election's leader (recorded: ELE judges it). Its
// context has no deadline: Leader gives up by itself within a few node
// timeouts, and a round whose deadline were the context's would end on two
// timers of one instant, which the Go scheduler runs in either order.
func (w *worker) readLeader() {
	v, term, err := w.rec.Leader(w.ctx, election)
	if err == nil {
		w.reads++
	}
	w.trace("%s leader of %q: %q term %d: %v", w.name, election, v, term, errOf(err))
}

// observe is the observer client's workload: until ctx ends, it follows
// the election's leaders with Observe for up to 4 TTLs at a time (each
// leader received is recorded: ELE requires the terms along a stream to
// increase) and reads the leader (Leader) in between. Each Observe stream
// is read until its channel closes, so that its goroutine has ended before
// the next call: one goroutine of the Client at a time draws from its
// generator. A stream is ended by a cancel, not a deadline, for
// readLeader's reason.
//
// In a schedule with stalls it only reads the leader, every half TTL or
// less. A campaigner that stands still cannot release a round of its
// Campaign that failed and landed late, so that round's value and later
// term are read on a quorum for as long as the stall lasts (Leader may
// report a failed round while its token is on a quorum); ELE tells such a
// read from a wrong term by when the read began, and the Recorder dates
// each leader an Observe stream receives from the stream's start, which
// may lie within the leader's window (seeds 10312 and 20594, when every
// mixed schedule stalled).
func (w *worker) observe(ctx context.Context) {
	time.Sleep(w.upTo(w.s.ttl / 4))
	if len(w.s.stalls) > 0 {
		for ctx.Err() == nil {
			w.readLeader()
			time.Sleep(w.upTo(w.s.ttl / 2))
		}
		return
	}
	for n := 1; ctx.Err() == nil; n++ {
		octx, cancel := context.WithCancel(ctx)
		t := time.AfterFunc(time.Duration(w.r.IntN(4))*w.s.ttl+w.upTo(w.s.ttl), cancel)
		for lead := range w.rec.Observe(octx, election) {
			w.reads++
			w.trace("%s observe#%d %q: %q term %d: ok", w.name, n, election, lead.Value, lead.Term)
		}
		t.Stop()
		cancel()
		if ctx.Err() == nil {
			w.readLeader()
		}
	}
}
