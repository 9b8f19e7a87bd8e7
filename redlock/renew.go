package redlock

import (
	"context"
	"time"

	"github.com/quorumlock/quorumlock/internal/schedule"
)

// The renewal service: a Client renews all its auto-extended locks from one
// goroutine and a heap of the locks ordered by when each is due, instead of
// a goroutine and a timer per lock. The locks due within a short window are
// renewed together, with one ExtendMany command per node for up to
// renewChunk of them (renewbatch.go). See docs/design.md, "Leases".

// renewChunk is the most locks one ExtendMany command renews: about 1 ms of
// a server's time, so that a chunk never holds a node up for long.
const renewChunk = 512

// maxRenewWindow bounds how early a lock is renewed so that it can join the
// renewals due just before it.
const maxRenewWindow = 250 * time.Millisecond

// renewer is a Client's renewal service: a Schedule of its auto-extended
// locks, whose goroutine (counted in the Client's WaitGroup) runs while
// locks are scheduled.
type renewer struct {
	c      *Client
	ctx    context.Context // of the renewals' rounds: close cancels it
	cancel context.CancelFunc
	s      *schedule.Schedule[*renewSlot]
}

// renewSlot is a Lock's place in the renewal service (only this file and the
// Schedule touch it).
type renewSlot struct {
	schedule.Entry
	l *Lock
}

// init makes r the renewal service of c.
func (r *renewer) init(c *Client) {
	r.c = c
	r.ctx, r.cancel = context.WithCancel(context.Background())
	r.s = schedule.New(schedule.Config[*renewSlot]{
		Now: c.cfg.Now,
		// A lock due a little after the head joins its batch.
		Window: func(head *renewSlot) time.Duration { return min(head.l.cfg.RenewInterval()/8, maxRenewWindow) },
		Run: func(batch []*renewSlot) {
			ls := make([]*Lock, len(batch))
			for i, rn := range batch {
				ls[i] = rn.l
			}
			r.renew(ls)
		},
		Go: c.wg.Go,
	})
}

// firstRenewal is when a newly acquired lock is first renewed: at a random
// point in the second half of its renewal interval, so that locks acquired
// together do not all come due together.
func firstRenewal(l *Lock, now time.Time) time.Time {
	if l.kind.session { // its key's refresh, every half key TTL
		iv := l.cfg.KeyTTL() / 2
		return now.Add(iv/2 + l.cfg.Rnd.Duration(iv/2+1))
	}
	iv := l.cfg.RenewInterval()
	return now.Add(min(iv/2+l.cfg.Rnd.Duration(iv/2+1), l.maxWait(now)))
}

// maxWait is the longest a renewal may wait at now: never so long that it
// could not be confirmed (one node timeout) with a node timeout to spare
// before the deadline, never less than a quarter node timeout.
func (l *Lock) maxWait(now time.Time) time.Duration {
	return max(l.cfg.NodeTimeout/4, l.Deadline().Sub(now)-2*l.cfg.NodeTimeout)
}

// add schedules l's next renewal at due; it reports false after close.
func (r *renewer) add(l *Lock, due time.Time) bool { return r.s.Add(&l.renewal, due) }

// remove unschedules l (a no-op when it is not scheduled).
func (r *renewer) remove(l *Lock) { r.s.Remove(&l.renewal) }

// close stops the service: no renewal starts after it returns, and those
// under way stop waiting for replies (their goroutines finish, counted in
// the Client's WaitGroup).
func (r *renewer) close() {
	r.cancel() // renewals under way stop waiting: Close's bound holds
	r.s.Close()
}
