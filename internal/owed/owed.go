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
