package redlock

import (
	"encoding/base64"
	"time"

	"github.com/quorumlock/quorumlock/internal/bugs"
	"github.com/quorumlock/quorumlock/internal/conf"
	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/internal/owed"
	"github.com/quorumlock/quorumlock/internal/wake"
	"github.com/quorumlock/quorumlock/pool"
)

// newNotifier returns the namer of a Client's waiters (nil unless the
// nodes keep lines: handoff) and its Notifier, which subscribes through
// the Pools that are node.Subscribers.
func newNotifier(cfg *conf.Config, pools []pool.Pool, handoff bool) (*wake.Names, *wake.Notifier) {
	var names *wake.Names
	client := ""
	if handoff {
		var b [12]byte
		cfg.Rnd.Read(b[:])
		client = base64.RawURLEncoding.EncodeToString(b[:])
		names = wake.NewNames(client)
	}
	subs := make([]node.Subscriber, len(pools))
	for i, p := range pools {
		subs[i], _ = p.(node.Subscriber)
	}
	return names, wake.New(wake.Config{
		Quorum: cfg.QuorumOf(len(pools)), Client: client, RetryMax: cfg.RetryMax,
		Random: cfg.Rnd.Duration, Subscribers: subs,
		// A connection set-up gets the time of a background command, which
		// also dials anew: Close stays within its stated bound even where
		// a Pool cannot end a set-up early.
		Setup: cfg.CleanupTimeout(), Timeout: cfg.NodeTimeout,
	})
}

// linePlace is where a Lock's acquiring call may wait in the key's line:
// waiter is its name there ("" for TryLock), and inLine tells that it may
// be in the line on some node (an attempt was told "taken"). The Lock
// leaves the line there once it holds the key, and its release takes it
// out of the line for good everywhere.
type linePlace struct {
	waiter string
	inLine bool
}

// leaveLineHeld leaves the line on the nodes where l, just acquired (before
// late sees its answers), holds the key (said) and whose acquire answered,
// if it may be in the line there: it must not be handed the key it holds.
func (l *Lock) leaveLineHeld(said []bool) {
	if l.place.inLine {
		l.c.leaveLine(l.cfg, l.id.rkey, l.place.waiter, false, func(i int) bool { return !said[i] && l.answered(i) }, false)
	}
}

// inLineLocked reports whether the lock may wait in the key's line on some
// node; l.mu must be held.
func (l *Lock) inLineLocked() bool { return l.place.inLine }

// leaveArgs makes o, the lock's release, also take its waiter out of the
// line for good, if it may be in it.
func (l *Lock) leaveArgs(o *node.Op) {
	l.mu.Lock()
	if l.place.inLine {
		o.Waiter, o.LineTTL = l.place.waiter, l.cfg.StayOut()
	}
	l.mu.Unlock()
}

// fillPlace makes o, an acquire, the waiter's at place ln.
func fillPlace(o *node.Op, ln *wake.Place, cfg *conf.Config) {
	o.Waiter, o.Rank, o.LineTTL, o.InLine = ln.ID, ln.Rank, cfg.LineTTL(), ln.Joined
}

// grace is the Grace of cfg's releases: Config.HandGrace where the nodes keep
// lines, else 0 (no hand-off).
func (c *Client) grace(cfg *conf.Config) time.Duration {
	if !c.handoff {
		return 0
	}
	return cfg.HandGrace()
}

// leaveLine takes waiter, whose Lock call ended, out of the key's line for
// good (its attempts that land late do not put it back) on the nodes where
// ask(i) (every node when ask is nil), and hands the key on where it had
// been handed to it, telling the next waiter if tell (a waiter that took
// the lock does not: its release will). A waiter that ended without the
// lock (wait) leaves like a round's command and waits for the nodes'
// answers up to the node timeout, so that a shared holder that asks next,
// from any Client, no longer finds it in the line; a waiter that took the
// lock leaves in the background. Close waits for the
// leaves. A leave that fails is sent again (leaving); an entry it still
// misses lapses by itself (Config.LineTTL).
func (c *Client) leaveLine(cfg *conf.Config, rkey, waiter string, tell bool, ask func(int) bool, wait bool) {
	if c.enter() != nil {
		return
	}
	defer c.wg.Done()
	wait = wait && !bugs.LeaveLate
	o := node.Op{Kind: node.Leave, Key: rkey, Waiter: waiter, Grace: cfg.HandGrace(), LineTTL: cfg.StayOut(), Tell: tell, Background: true, Values: ownWork}
	deadline := c.bgDeadline(cfg)
	// One receiver for every node (by value, it would be boxed per node).
	lv := &leaving{c: c, cfg: cfg, o: o, again: owed.Policy{Wait: cfg.RecheckDelay(), Horizon: time.Now().Add(cfg.StayOut())}}
	if wait { // with the rounds' commands, bounded like one of them
		o.Background, o.Follow = false, cfg.Follow()
		if d := time.Now().Add(cfg.NodeTimeout); d.Before(deadline) {
			deadline = d
		}
		lv.done = make(chan struct{}, len(c.senders))
	}
	op := node.New(o)
	sent := 0
	for i, s := range c.senders {
		if ask == nil || ask(i) {
			c.wg.Add(1)
			sent++
			s.Send(op, deadline, lv, i)
		}
	}
	if wait {
		lv.await(sent, cfg.NodeTimeout)
	}
}

// leaving receives the results of a Leave; done, when not nil, hears of
// each. A leave that was never written (queued past its deadline, no
// connection) is sent again in the background (again: after Config.RecheckDelay,
// until Config.StayOut from the first): missed, it would leave the waiter's entry
// to lapse by itself, and no mark to keep its late attempts out. One that
// got no reply is not: it may have run, and after a stall every waiter's
// leave times out at once.
type leaving struct {
	c     *Client
	cfg   *conf.Config
	o     node.Op
	again owed.Policy
	done  chan struct{}
}

// Deliver takes node i's answer; it may run for several nodes at once, and
// changes nothing in l.
func (l *leaving) Deliver(i int, r node.Result) {
	defer l.c.wg.Done()
	if l.done != nil {
		l.done <- struct{}{} // buffered for every node
	}
	if r.Err == nil || node.MayHaveWritten(r.Err) || node.Refused(r.Err) {
		return
	}
	l.c.later.Again(&l.c.wg, l.again, func(next owed.Policy) {
		again := &leaving{c: l.c, cfg: l.cfg, o: l.o, again: next}
		o := l.o
		o.Follow = 0
		l.c.sendOwn(o, l.c.bgDeadline(l.cfg), i, again)
	})
}

// await waits for n results, at most d.
func (l *leaving) await(n int, d time.Duration) {
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
