package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"
)

// A stalled client process (schedule.stalls): for a span of virtual time,
// one Client's process stands still, as a process starved of CPU does, and
// none of its goroutines run. A synctest bubble cannot stop goroutines, so
// the simulator models what the rest of the world sees of such a process,
// on the Client's side of every link (its Pools, stallGate):
//
//   - its commands are not written: each waits, in order, and is written
//     when the stall ends, or, when its deadline (a delete's: deadline +
//     Follow, node.WriteBy) passed meanwhile, never, and is answered
//     node.ErrNotSent then, as a Pool of package pool answers a command
//     queued past its deadline;
//   - nothing reaches it: the nodes' replies, the errors of its
//     connections (resets, refusals, "not sent") and the events of its
//     subscriptions wait, in order, and are delivered when the stall ends
//     (one a nanosecond after the other: open);
//   - its Pools' own waits for the replies of commands written before the
//     stall are moved later by the stall's length, as package pool moves
//     them by what internal/stall counted: a reply that came during the
//     stall is read at its end, not lost to a timeout;
//   - its application stops between calls (worker.wake): the workloads
//     start nothing while their Client stands still.
//
// What the model cannot stop, and how that differs from a real stall: the
// library's own timers fire on time during the stall. A round in flight
// when the stall begins ends at its deadline, during the stall, for want of
// the replies the gate holds, and its roll-back and its retries are queued
// behind the gate (a retry's commands are never written unless it began in
// the stall's last node timeout: their deadlines have passed); a real round
// would see its timer fire late, at the stall's end, take the replies that
// came meanwhile (internal/quorum's grace) and could win when validity is
// left. So the simulator never plays a lock won across a stall, and plays
// more failed rounds and roll-backs than a real stall causes (each answered
// at the stall's end, as late replies of failed rounds: the path the
// clean-up must take anyway). For ST this errs on the hard side: at a
// stall's end the simulated Client has a failed round's keys to remove
// where a real one may hold the lock. (internal/quorum's grace for a timer
// its owner sees late never applies: a synctest timer is never late.)
// Likewise a lock's lease and its renewals run on time: a lock held through
// a stall longer than its validity is lost during the stall (a real one is
// found lost when the stall ends), and the renewals that fall in the stall
// fail there (a real Client renews once, late, at its end, if the lock is
// still valid). A call the application had in progress when the stall began
// may return during it (a real one returns after it); the workloads then
// start nothing more until the stall ends (docs/chaos.md, "A stalled
// client").
type stallGate struct {
	client string
	tr     *tracer

	mu   sync.Mutex
	on   bool          // a stall is under way
	len  time.Duration // its length
	held []func()      // what waits for its end, in order
}

// clientStall is one stall of one client's process.
type clientStall struct {
	client  int
	at, dur time.Duration
}

func (s clientStall) end() time.Duration { return s.at + s.dur }

func (s clientStall) String() string {
	return fmt.Sprintf("c%d stalled at %v for %v", s.client, s.at, s.dur)
}

// The lengths of the stalls drawn: from a scheduler's long pause to a
// container throttled for seconds.
const (
	stallMin = 200 * time.Millisecond
	stallMax = 3 * time.Second
)

// drawStall draws one stall of client c that begins at from, of a length
// spread evenly on a log scale between stallMin and stallMax (as many
// stalls below 775 ms as above).
func drawStall(r *rand.Rand, c int, from time.Duration) clientStall {
	d := time.Duration(float64(stallMin) * math.Pow(float64(stallMax)/float64(stallMin), r.Float64()))
	return clientStall{client: c, at: from, dur: d}
}

// mixedStallShare is the share of the mixed schedules (played under no
// control) in which one client stalls, as one in mixedStallShare.
const mixedStallShare = 8

// drawMixedStalls draws, for one mixed schedule in mixedStallShare, one or
// two stalls of one client within the workload's span, from a generator of
// their own (the other draws of the seed's schedule are those it had
// before stalls were played).
func drawMixedStalls(s schedule) []clientStall {
	r := rand.New(rand.NewPCG(s.seed, 0x57a11))
	if r.IntN(mixedStallShare) != 0 {
		return nil
	}
	c := r.IntN(s.clients)
	st := drawStall(r, c, time.Duration(r.Int64N(int64(s.span()))))
	out := []clientStall{st}
	if r.IntN(3) == 0 {
		out = append(out, drawStall(r, c, st.end()+time.Duration(r.Int64N(int64(s.span())))))
	}
	return out
}

// stallsOf are the stalls of client id, in order.
func (s schedule) stallsOf(id int) []clientStall {
	var out []clientStall
	for _, st := range s.stalls {
		if st.client == id {
			out = append(out, st)
		}
	}
	return out
}

// gatesOf makes the gates of the clients of s that stall, by client index
// (one per process: the stall workload's processes have two Clients,
// which share it), and sets them to close and open on time (virtual time
// since now).
func gatesOf(s schedule, tr *tracer) map[int]*stallGate {
	if len(s.stalls) == 0 {
		return nil
	}
	gs := map[int]*stallGate{}
	for _, st := range s.stalls {
		g := gs[st.client]
		if g == nil {
			g = &stallGate{client: fmt.Sprintf("c%d", st.client), tr: tr}
			gs[st.client] = g
		}
		time.AfterFunc(st.at, func() { g.close(st.dur) })
		time.AfterFunc(st.end(), g.open)
	}
	return gs
}

// close begins a stall of length d.
func (g *stallGate) close(d time.Duration) {
	g.mu.Lock()
	g.on, g.len = true, d
	g.mu.Unlock()
	g.tr.add("%s stalls for %v", g.client, d)
}

// open ends the stall: what waited is written or delivered, in order, one
// a nanosecond after the other, and what that adds meanwhile after it;
// then the gate lets everything by. One at a time, because each sets the
// Client's goroutines going, and those draw from the Client's seeded
// generator (jitter, tokens): goroutines set going in one instant would
// draw in the order the Go scheduler runs them, and the schedule would
// not replay. Time advances only once all of them have stopped.
func (g *stallGate) open() {
	g.mu.Lock()
	n := len(g.held)
	g.mu.Unlock()
	g.tr.add("%s runs again (%d commands and answers waited)", g.client, n)
	g.next()
}

// next does the first thing that waits, a nanosecond from now, then the
// next; or opens the gate when nothing waits.
func (g *stallGate) next() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.held) == 0 {
		g.on = false
		return
	}
	f := g.held[0]
	g.held = g.held[1:]
	time.AfterFunc(time.Nanosecond, func() {
		f()
		g.next()
	})
}

// hold keeps f for the stall's end and reports true when a stall is under
// way; else it reports false, and the caller does f itself. A nil gate (a
// client that never stalls) holds nothing.
func (g *stallGate) hold(f func()) bool {
	if g == nil {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.on {
		return false
	}
	g.held = append(g.held, f)
	return true
}

// stalled returns the length of the stall under way, 0 when none is.
func (g *stallGate) stalled() time.Duration {
	if g == nil {
		return 0
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.on {
		return 0
	}
	return g.len
}

// wake returns at once unless the worker's client stands still; then it
// sleeps until the stall ends: the application starts nothing meanwhile.
func (w *worker) wake() {
	if len(w.stalls) == 0 {
		return
	}
	at := time.Since(w.t0)
	for _, st := range w.stalls {
		if at >= st.at && at < st.end() {
			time.Sleep(st.end() - at)
			return
		}
	}
}
