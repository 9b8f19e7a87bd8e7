package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/quorumlock/quorumlock/drift"
	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/internal/quorum"
	"github.com/quorumlock/quorumlock/internal/schedule"
)

// The renewal service: a Client renews all its auto-extended locks from one
// goroutine and a heap of the locks ordered by when each is due, instead of
// a goroutine and a timer per lock. The locks due within a short window are
// renewed together, with one ExtendMany command per node for up to
// renewChunk of them. See docs/design.md, "Leases".

// renewChunk is the most locks one ExtendMany command renews: about 1 ms of
// a server's time, so that a chunk never holds a node up for long.
const renewChunk = 512

// maxRenewWindow bounds how early a lock is renewed so that it can join the
// renewals due just before it.
const maxRenewWindow = 250 * time.Millisecond

// renewer is a Client's renewal service: a Schedule of its auto-extended
// locks (Add and Remove schedule a Lock's renewal Slot), whose goroutine
// (counted in the Client's WaitGroup) runs while locks are scheduled.
type renewer struct {
	*schedule.Schedule[*schedule.Slot[*Lock]]
	c      *Client
	ctx    context.Context // of the renewals' rounds: close cancels it
	cancel context.CancelFunc
}

// init makes r the renewal service of c.
func (r *renewer) init(c *Client) {
	r.c = c
	r.ctx, r.cancel = context.WithCancel(context.Background())
	r.Schedule = schedule.New(schedule.Config[*schedule.Slot[*Lock]]{
		Now: c.cfg.Now,
		// A lock due a little after the head joins its batch.
		Window: func(head *schedule.Slot[*Lock]) time.Duration {
			return min(head.Value.cfg.RenewInterval()/8, maxRenewWindow)
		},
		Run: func(batch []*schedule.Slot[*Lock]) {
			ls := make([]*Lock, len(batch))
			for i, rn := range batch {
				ls[i] = rn.Value
			}
			r.renew(ls)
		},
		Go: c.wg.Go,
	})
}

// add schedules l's next renewal at due; it reports false after close.
func (r *renewer) add(l *Lock, due time.Time) bool { return r.Add(&l.renewal, due) }

// close stops the service: no renewal starts after it returns, and those
// under way stop waiting for replies (their goroutines finish, counted in
// the Client's WaitGroup).
func (r *renewer) close() {
	r.cancel() // renewals under way stop waiting: Close's bound holds
	r.Close()
}

// renew renews a batch of due locks: the ones a renewal may go to, grouped
// by the TTL they are renewed to (and, where a Pool is a Redis Cluster, by
// hash slot), one ExtendMany round per chunk of up to renewChunk locks, all
// chunks in flight at once. Each lock holds its op slot (one Extend or
// Release at a time) from before its command is sent until its outcome is
// recorded. It runs on a goroutine counted in c.wg.
func (r *renewer) renew(batch []*Lock) {
	c := r.c
	now := c.cfg.Now()
	groups := map[renewKey][]*Lock{}
	for _, l := range batch {
		select { // an Extend or Release is under way: try again soon
		case l.op <- struct{}{}:
		default:
			r.add(l, now.Add(l.cfg.NodeTimeout/4))
			continue
		}
		ttl, ok := l.renewalTTL(now)
		switch {
		case !ok:
			<-l.op
		case l.landingNow() != nil && l.kind.session: // its key's TTL is long: later
			<-l.op
			r.add(l, now.Add(l.cfg.NodeTimeout))
		case l.landingNow() != nil || !l.kind.batch: // its own round chains behind the SET; the kinds that do not batch have commands of their own
			<-l.op
			c.wg.Go(func() { r.renewOne(l, ttl) })
		default:
			k := renewKey{ttl: ttl, timeout: l.cfg.NodeTimeout, quorum: l.cfg.Quorum, keys: l.kind.session, slot: -1}
			if c.slotted { // one command's keys must share a slot on a Cluster
				k.slot = node.Slot(l.id.rkey)
			}
			groups[k] = append(groups[k], l)
		}
	}
	r.renewGroups(groups)
}

// renewGroups renews each group of locks by ExtendMany rounds of up to
// renewChunk locks, once the nodes' identities allow.
func (r *renewer) renewGroups(groups map[renewKey][]*Lock) {
	c := r.c
	if len(groups) == 0 {
		return
	}
	if err := c.ids.Check(r.ctx, c.idBounds(c.cfg)); err != nil {
		for _, ls := range groups {
			r.failAll(ls, err)
		}
		return
	}
	var chunks []*renewal
	for k, ls := range groups {
		for part := range slices.Chunk(ls, renewChunk) {
			rn := r.start(part, k.ttl)
			rn.all = k.keys
			chunks = append(chunks, rn)
		}
	}
	for _, rn := range chunks {
		rn.settle()
		rn.apply(r)
	}
}

// renewKey groups the locks one command can renew together: the TTL it
// sets, and what the round's wait and vote depend on.
type renewKey struct {
	ttl, timeout time.Duration
	quorum       int
	keys         bool // session locks' keys: refreshed, not renewed (refreshed)
	slot         int  // the keys' hash slot where a Pool is a Redis Cluster, else -1
}

// renewalTTL returns the TTL the lock's renewal at now sets, or false when
// it is not renewed: released, lost, declared lost now (too little validity
// left to confirm a renewal), or held as long as WithMaxHold allows.
func (l *Lock) renewalTTL(now time.Time) (time.Duration, bool) {
	if l.usable(now) != nil {
		return 0, false
	}
	cfg := l.cfg
	if l.kind.session { // its session renews it; its key only needs to live
		return cfg.KeyTTL(), true
	}
	if left := l.Deadline().Sub(now); left <= cfg.NodeTimeout {
		l.declareLost(fmt.Sprintf("%v of validity left, less than the node timeout: no renewal can be confirmed in time", left))
		return 0, false
	}
	ttl := cfg.TTL
	if cfg.MaxHold > 0 {
		remaining := l.id.acquired.Add(cfg.MaxHold).Sub(now)
		if drift.Check(remaining, cfg.DriftFactor, cfg.NodeTimeout) != nil {
			cfg.Logger.Warn("redlock: maximum hold time reached; the lock is left to expire", "key", l.id.key, "max_hold", cfg.MaxHold)
			return 0, false // the lease timer marks it lost at its deadline
		}
		ttl = min(ttl, remaining.Truncate(time.Millisecond)) // never renewed past acquisition + maxHold
		if !drift.Deadline(now, ttl, cfg.DriftFactor).After(l.Deadline()) {
			return 0, false // no renewal can move the deadline any later
		}
	}
	return ttl, true
}

// renewOne renews l through Extend, for a lock whose acquire command has
// not answered on some node (Extend holds its command back there).
func (r *renewer) renewOne(l *Lock, ttl time.Duration) {
	start := l.cfg.Now()
	err := l.Extend(r.ctx, ttl)
	r.after(l, start, err)
}

// after reports a renewal's outcome and schedules the lock's next one: a
// renewal interval on, after a success (never so late that it could not be
// confirmed); halfway to the last moment a renewal can be confirmed after a
// failure, but not sooner than a quarter node timeout (renewalTTL declares
// the loss once it is too late); never after release, loss or Close.
func (r *renewer) after(l *Lock, start time.Time, err error) {
	cfg := l.cfg
	now := cfg.Now()
	switch {
	case err == nil:
		r.c.observe(cfg, func(o Observer) { o.Extended(l.event(now.Sub(start), nil)) })
		r.add(l, now.Add(min(cfg.RenewInterval(), cfg.RenewalWait(l.Deadline(), now))))
		return
	case errors.Is(err, ErrReleased), errors.Is(err, ErrClosed):
		return
	}
	r.c.observe(cfg, func(o Observer) { o.ExtendFailed(l.event(now.Sub(start), err)) })
	if errors.Is(err, ErrLockLost) {
		return // extended has marked it lost and told the observer
	}
	left := l.Deadline().Sub(now)
	r.add(l, now.Add(min(cfg.RenewInterval(), max((left-cfg.NodeTimeout)/2, cfg.NodeTimeout/4))))
}

// failAll records err as the outcome of renewals that could not be sent. A
// session lock's key refresh is tried again an eighth of the key's TTL later
// (as refreshed does after a partial one), without an observer event: the
// Observer sees the session's renewals, not its locks' key refreshes.
func (r *renewer) failAll(ls []*Lock, err error) {
	for _, l := range ls {
		start := l.cfg.Now()
		<-l.op
		if l.kind.session {
			r.add(l, start.Add(l.cfg.KeyTTL()/8))
			continue
		}
		r.after(l, start, err)
	}
}

// renewal is one ExtendMany round: the chunk's locks, and per lock the
// nodes that confirmed and the nodes that said it is not held.
type renewal struct {
	rd      *round
	ls      []*Lock
	ttl     time.Duration
	start   time.Time
	yes, no []uint8
	reps    []quorum.Reply // per node: its reply, once taken
	all     bool           // wait for every node, not just until each lock is decided
}

// start sends the chunk's command. Its wait is half the time the chunk's
// most urgent lock could still use a confirmation (its validity less a node
// timeout), at least one node timeout, and no longer than Close waits for
// background work (Config.CleanupTimeout): a large batch may take a busy server
// far longer than a node timeout, and a renewal that fails only to be sent
// again adds load to a server that already cannot keep up; the other half
// is left for one retry, when a node lost the command. It goes to the
// Pools' background queues, so that its long wait never holds up other
// rounds; replies after the wait are not waited for (a late extend is
// harmless).
func (r *renewer) start(ls []*Lock, ttl time.Duration) *renewal {
	c := r.c
	cfg := *ls[0].cfg
	now := cfg.Now()
	left := cfg.TTL
	keys, tokens := make([]any, len(ls)), make([]any, len(ls))
	for i, l := range ls {
		keys[i], tokens[i] = l.id.keyArg, l.id.tokenArg
		left = min(left, l.Deadline().Sub(now)-cfg.NodeTimeout)
	}
	cfg.NodeTimeout = min(max(cfg.NodeTimeout, left/2), cfg.CleanupTimeout())
	rn := &renewal{ls: ls, ttl: ttl, start: now, yes: make([]uint8, len(ls)), no: make([]uint8, len(ls))}
	rn.rd = c.run(r.ctx, &cfg, send{spec: opExtendMany, o: node.Op{TTL: ttl, Keys: keys, Tokens: tokens, Background: true}})
	rn.reps = make([]quorum.Reply, len(c.pools))
	return rn
}

// settle takes replies until every lock of the chunk is decided: confirmed
// by a quorum, or said not held by so many nodes that no quorum can confirm,
// or neither can change any more (or the round ended).
func (rn *renewal) settle() {
	rd := rn.rd
	n, q, pending := len(rd.res), rd.q, rd.r.Pending()
	for pending > 0 && (rn.all || rn.undecided(n, q, pending)) {
		rep, ok := rd.r.Next()
		if !ok {
			break
		}
		pending--
		rd.out[rep.Node] = false
		rn.reps[rep.Node] = rep
		rd.note(rep) // a failed renewal may begin its node's outage: logged now, not at the loss
		if rep.Err != nil {
			rd.res[rep.Node] = failedResult(rep.Node, rd.c, rep.Err, rep.Latency)
			continue
		}
		rd.res[rep.Node] = NodeResult{Node: rd.res[rep.Node].Node, Outcome: OutcomeOK, Latency: rep.Latency}
		for i := range rn.ls {
			if rep.Str[i] == '1' {
				rn.yes[i]++
			} else {
				rn.no[i]++
			}
		}
	}
}

// undecided reports whether a lock of the chunk may still be confirmed or
// proven gone by the pending replies (settle's rule, per lock).
func (rn *renewal) undecided(n, q, pending int) bool {
	for i := range rn.ls {
		yes, no := int(rn.yes[i]), int(rn.no[i])
		if yes < q && no <= n-q && (yes+pending >= q || no+pending > n-q) {
			return true
		}
	}
	return false
}

// apply records each lock's outcome (as Extend would), frees its op slot
// and schedules its next renewal; late replies are harmless (an extend
// never shortens a key) and dropped.
func (rn *renewal) apply(r *renewer) {
	rd := rn.rd
	rd.finish(nil)
	n, q := len(rd.res), rd.q
	for i, l := range rn.ls {
		if l.kind.session {
			rn.refreshed(r, i, l)
			continue
		}
		won, gone := int(rn.yes[i]) >= q, int(rn.no[i]) > n-q
		err := l.extended(r.ctx, won, gone, func() *QuorumError { return rn.quorumError(i) }, rn.start, rn.ttl)
		<-l.op
		r.after(l, rn.start, err)
	}
}

// quorumError describes lock i's failed renewal, node by node.
func (rn *renewal) quorumError(i int) *QuorumError {
	rd := rn.rd
	res := slices.Clone(rd.res)
	for j, rep := range rn.reps {
		if res[j].Outcome == OutcomeOK && rep.Str[i] != '1' {
			res[j].Outcome = OutcomeNotHeld
		}
	}
	elapsed := time.Since(rd.start)
	markUnanswered(res, rd.r.Err(), elapsed)
	return &QuorumError{Op: "extend", Key: rn.ls[i].id.key, Quorum: rd.q, Nodes: res, Elapsed: elapsed, TTL: rn.ttl}
}

// refreshed records a session lock's key refresh: each node that confirmed
// in time vouches for its key for the TTL set from the round's start; a node
// that said the key no longer holds the token, or whose earlier refresh had
// stopped vouching before this one was read (the key may have expired in
// between), stops counting for the lock. It
// frees the lock's op slot and schedules the next refresh: half a key TTL
// on when every node the lock holds confirmed, sooner otherwise.
func (rn *renewal) refreshed(r *renewer, i int, l *Lock) {
	cfg := l.cfg
	until := drift.Deadline(rn.start, rn.ttl, cfg.DriftFactor)
	now := cfg.Now()
	all := true
	l.mu.Lock()
	for j, rep := range rn.reps {
		ok, dropped := l.hold.Refreshed(j, rep, i, now, until)
		all = ok && all
		if dropped { // the deadline may have moved earlier
			l.rearmLocked()
		}
	}
	l.mu.Unlock()
	<-l.op
	next := rn.ttl / 2
	if !all {
		next = rn.ttl / 8
	}
	r.add(l, cfg.Now().Add(next))
}
