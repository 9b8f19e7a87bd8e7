// Package owed sends the commands a Client owes the nodes and nobody waits
// for (a delete of a token a node may hold, a waiter's leave), each sent
// again while it fails, on timers that Close flushes: pending re-sends go
// at once, one last time. Every command and timer is counted in the
// Client's WaitGroup, so that Close waits for them. Its types are safe for
// concurrent use.
package owed

import (
	"cmp"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/quorumlock/quorumlock/internal/node"
)

// MaxWait is the longest wait between two re-sends.
const MaxWait = time.Second

// Policy is how a command is sent again while it fails: after Wait (0:
// never), then twice as long each time up to MaxWait, until Horizon.
type Policy struct {
	Wait    time.Duration
	Horizon time.Time
}

// Later holds the re-sends waiting for their time. The zero Later is ready.
type Later struct {
	mu     sync.Mutex
	closed bool
	timers map[*time.Timer]pending
	seq    uint64 // pending.seq of the next one
}

// pending is one re-send; seq orders them as they were scheduled, so that
// Stop sends them in that order (a map's order is random, and the
// simulator replays a seed exactly).
type pending struct {
	seq uint64
	fn  func()
}

// Again schedules send, with the policy for the time after that, to run
// after p's wait on a timer counted in wg, and reports whether it did:
// false when p allows no more re-sends. Once Stop has run, send runs at
// once, one last time, with no policy.
func (lt *Later) Again(wg *sync.WaitGroup, p Policy, send func(next Policy)) bool {
	wait := min(p.Wait, time.Until(p.Horizon))
	if p.Wait <= 0 || wait <= 0 {
		return false
	}
	next := Policy{Wait: min(2*p.Wait, MaxWait), Horizon: p.Horizon}
	if !lt.after(wg, wait, func() { send(next) }) {
		send(Policy{}) // Close has begun: once more, now, and no more
	}
	return true
}

// after runs fn after d on a timer counted in wg, and reports whether it was
// scheduled (not after Stop).
func (lt *Later) after(wg *sync.WaitGroup, d time.Duration, fn func()) bool {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	if lt.closed {
		return false
	}
	if lt.timers == nil {
		lt.timers = map[*time.Timer]pending{}
	}
	wg.Add(1)
	var t *time.Timer
	t = time.AfterFunc(d, func() {
		defer wg.Done()
		lt.mu.Lock()
		delete(lt.timers, t) // after after has returned: it holds mu until t is set
		lt.mu.Unlock()
		fn()
	})
	lt.timers[t] = pending{lt.seq, fn}
	lt.seq++
	return true
}

// Stop refuses new re-sends and runs the pending ones now, in the order
// they were scheduled.
func (lt *Later) Stop(wg *sync.WaitGroup) {
	lt.mu.Lock()
	lt.closed = true
	timers := lt.timers
	lt.timers = nil
	lt.mu.Unlock()
	order := slices.SortedFunc(maps.Keys(timers), func(a, b *time.Timer) int { return cmp.Compare(timers[a].seq, timers[b].seq) })
	for _, t := range order {
		if t.Stop() {
			timers[t].fn()
			wg.Done()
		}
	}
}

// Env is how a Client's owed commands reach its nodes.
type Env struct {
	// Senders are the nodes' queues, through which a Leave goes first: a
	// Leave is only sent where every Pool has one (none is nil).
	Senders []node.Sender
	// Send sends o to node n, bounded by bound from now (or sooner, as the
	// Client bounds it), counted in WG; r gets its result and calls
	// WG.Done once it has.
	Send     func(o node.Op, bound time.Duration, n int, r node.Receiver)
	WG       *sync.WaitGroup
	Later    *Later
	Failed   func(n int, err error) // a node's failure, for the health log
	Answered func(n int)            // a node's answer, for the health log
}

// Delete is a delete of a token a node may hold, sent in the background.
// It is sent again, on Again, while it fails without the node's refusal
// (it may never have been written) and, when Unsure (the acquire whose
// fate is unknown may still land), also while it finds nothing.
type Delete struct {
	Env    *Env
	Op     node.Op       // the delete
	Bound  time.Duration // of each send, from when it is sent
	Unsure bool
	Again  Policy
}

// Send sends d to node n. The caller holds a count on the Client's
// WaitGroup.
func (d *Delete) Send(n int) { d.Env.Send(d.Op, d.Bound, n, d) }

// Deliver takes node n's answer to d: it sends d again if it must, and
// tells the health log of the node's answer or failure otherwise (a delete
// left undone expires with its key's TTL).
func (d *Delete) Deliver(n int, r node.Result) {
	env := d.Env
	defer env.WG.Done()
	again := d.Unsure && r.Err == nil && r.Int == 0 || r.Err != nil && !node.Refused(r.Err)
	if again && env.Later.Again(env.WG, d.Again, func(next Policy) {
		nd := *d
		nd.Again = next
		nd.Send(n)
	}) {
		return
	}
	if r.Err != nil {
		env.Failed(n, r.Err)
	} else {
		env.Answered(n)
	}
}

// Leave is a waiter's leave of a key's line, sent to the nodes through their
// queues at once and, to a node where it was never written (queued past its
// deadline, no connection), sent again on Again: missed, it would leave the
// waiter's entry to lapse by itself, and no mark to keep its late attempts
// out. One that got no reply is not: it may have run, and after a stall
// every waiter's leave times out at once. The health log is not told.
type Leave struct {
	Env   *Env
	Op    node.Op       // the leave
	Bound time.Duration // of each re-send, from when it is sent
	Again Policy
	done  chan struct{} // hears of each answer while SendAll waits
}

// SendAll sends l to the nodes i where ask(i) (every node when ask is nil),
// one op for all, by deadline. With wait > 0 it goes with the rounds'
// commands (not in the background, followed for follow) and SendAll
// returns once every node asked answered, or after wait. The caller holds a
// count on the Client's WaitGroup.
func (l *Leave) SendAll(ask func(int) bool, deadline time.Time, wait, follow time.Duration) {
	o := l.Op
	if wait > 0 {
		o.Background, o.Follow = false, follow
		if d := time.Now().Add(wait); d.Before(deadline) { // bounded like a round's command
			deadline = d
		}
		l.done = make(chan struct{}, len(l.Env.Senders))
	}
	op := node.New(o) // one op and one receiver for every node
	sent := 0
	for i, s := range l.Env.Senders {
		if ask == nil || ask(i) {
			l.Env.WG.Add(1)
			sent++
			s.Send(op, deadline, l, i)
		}
	}
	if wait > 0 {
		l.await(sent, wait)
	}
}

// Deliver takes node n's answer to l; it may run for several nodes at once,
// and changes nothing in l.
func (l *Leave) Deliver(n int, r node.Result) {
	env := l.Env
	defer env.WG.Done()
	if l.done != nil {
		l.done <- struct{}{} // buffered for every node
	}
	if r.Err == nil || node.MayHaveWritten(r.Err) || node.Refused(r.Err) {
		return
	}
	env.Later.Again(env.WG, l.Again, func(next Policy) { // l.Op: in the background, unfollowed
		env.Send(l.Op, l.Bound, n, &Leave{Env: env, Op: l.Op, Bound: l.Bound, Again: next})
	})
}

// await waits for n answers, at most d.
func (l *Leave) await(n int, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	for range n {
		select {
		case <-l.done:
		case <-t.C:
			return
		}
	}
}
