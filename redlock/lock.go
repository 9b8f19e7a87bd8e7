package redlock

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/quorumlock/quorumlock/drift"
	"github.com/quorumlock/quorumlock/internal/bugs"
	"github.com/quorumlock/quorumlock/internal/conf"
	"github.com/quorumlock/quorumlock/internal/lease"
	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/internal/quorum"
	"github.com/quorumlock/quorumlock/internal/schedule"
	"github.com/quorumlock/quorumlock/internal/session"
	"github.com/quorumlock/quorumlock/internal/wake"
)

// lockID is what a Lock holds, and as whom.
type lockID struct {
	key   string // as the caller named it (several keys: joined by ", ")
	rkey  string // the Redis key (several keys: the first)
	token string
	// keys and keyArgs are a lock of several keys' own names and Redis
	// keys (as command arguments); nil for a lock of one key.
	keys    []string
	keyArgs []any
	// keyArg and tokenArg are rkey and token boxed as command arguments
	// by the acquiring round, reused by renewals and the release.
	keyArg, tokenArg any
	permit           *permitOf // a semaphore's permit, else nil
	fence            uint64    // 0 without fencing
	acquired         time.Time // start of the acquiring round
}

// Lock is a lock acquired on a quorum of nodes, the handle that extends,
// checks and releases it. Every method is safe for concurrent use; Extend
// and Release run one at a time, and the other methods never wait for them.
type Lock struct {
	c    *Client
	cfg  *conf.Config
	id   lockID // what it holds, and as whom: set by newLock, read-only after
	kind *kind  // which commands it runs (kinds.go)

	// op serialises Extend and Release: a one-slot semaphore rather than a
	// mutex, because it is held across I/O and a goroutine waiting on a
	// channel is durably blocked for testing/synctest, unlike one on a mutex.
	op chan struct{}

	mu   sync.Mutex // guards life, place, landing and hold
	life lease.Life // its validity, and whether it was released or lost (lease.go)

	place   wake.Spot // its acquiring call's place in the key's line (landing.go); guarded by mu
	landing landing   // what of its acquiring round has not answered yet (landing.go); guarded by mu

	hold session.Hold // a session lock's hold on its session (session.go); guarded by mu

	renewal schedule.Slot[*Lock] // its place in the renewal service (renew.go)
}

// Key returns the lock's key without prefix (of several keys, the first; of
// a semaphore's permit, the semaphore's name).
func (l *Lock) Key() string {
	if l.kind.allKeys {
		return l.id.keys[0]
	}
	return l.id.key
}

// Keys returns every key the lock covers, without prefix, in the caller's
// order, in a slice the caller may modify.
func (l *Lock) Keys() []string {
	if l.kind.allKeys {
		return slices.Clone(l.id.keys)
	}
	return []string{l.id.key}
}

// Shared reports whether the lock is one of its key's shared holders
// (acquired with Shared). Safe for concurrent use.
func (l *Lock) Shared() bool { return l.kind.shared }

// Permit returns which of its semaphore's permits the lock is, from 0 to
// Permits()-1, or -1 for a lock that is no permit.
func (l *Lock) Permit() int {
	if !l.kind.permit {
		return -1
	}
	return l.id.permit.slot
}

// permitOf is what a semaphore's permit extends besides its key.
type permitOf struct {
	count   string // the semaphore's count key
	permits int
	slot    int
}

// Token returns the lock's token, which Client.Resume takes: the attempt's
// value, then, with WithMetadata, the byte 0x1d and the description.
func (l *Lock) Token() string { return l.id.token }

// Metadata returns the holder's description the lock carries (WithMetadata),
// "" when none.
func (l *Lock) Metadata() string {
	_, meta := node.SplitToken(l.id.token)
	return meta
}

// Fence returns the lock's fencing token (WithFencing), strictly greater
// than every earlier holder's of the key; 0 without fencing.
func (l *Lock) Fence() uint64 { return l.id.fence }

// Deadline returns the end of the lock's validity (the start of its last
// acquiring or extending round + TTL − drift allowance): do not act under
// the lock from then on. Compare it with time.Now, not other machines' times.
func (l *Lock) Deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadlineLocked()
}

// Extend makes the lock live at least ttl (0: its TTL) more on the nodes
// that hold it; it never re-creates an expired lock, and never shortens a
// key's TTL there: a shorter ttl moves only this Lock's deadline earlier, and
// the key blocks others until its longer TTL ends. On success a quorum
// confirmed in time and the deadline is the extend's start + ttl less the
// drift allowance; after a failure it never moves later. It returns ErrReleased after Release or Client.Close
// (ErrClosed while Close runs), an error matching ErrLockLost once the
// deadline passed or too many nodes lost the token for a quorum, else a
// *QuorumError matching ErrNotHeld; and ctx.Err() too if ctx ended first
// (the lock is not lost for that). A ttl below 1 ms or leaving no validity
// is an error, as is any but 0 or the TTL for a session lock (WithAutoExtend).
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	cfg := l.cfg
	if ttl == 0 {
		ttl = cfg.TTL
	}
	if ttl < time.Millisecond {
		return fmt.Errorf("redlock: extend %q: TTL %v must be at least 1ms (0 means the lock's TTL)", l.id.key, ttl)
	}
	ttl = ttl.Truncate(time.Millisecond)
	if err := drift.Check(ttl, cfg.DriftFactor, cfg.NodeTimeout); err != nil {
		return fmt.Errorf("redlock: extend %q: %w", l.id.key, err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("redlock: extend %q: not attempted: %w", l.id.key, err)
	}
	select { // one Extend or Release at a time
	case l.op <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("redlock: extend %q: waiting for the previous extend: %w", l.id.key, ctx.Err())
	}
	handed := false // the slot is handed to freeAfter
	defer func() {
		if !handed {
			<-l.op
		}
	}()
	start := cfg.Now()
	if err := l.usable(start); err != nil {
		return err
	}
	if err := l.c.enterRound(ctx, cfg); err != nil {
		return err
	}
	defer l.c.wg.Done()
	if l.kind.extend == nil {
		return l.extendSession(ctx, ttl, start)
	}

	o := node.Op{Key: l.id.rkey, Token: l.id.token, TTL: ttl, KeyArg: l.id.keyArg, TokenArg: l.id.tokenArg}
	l.kind.extendArgs(l, &o)
	rd := l.c.run(ctx, cfg, send{spec: l.kind.extend, o: o, l: l})
	rd.settle(nil)
	err := l.extended(ctx, rd.won(), rd.gone(), func() *QuorumError { return rd.quorumError(l.id.key) }, start, ttl)
	handed = true
	l.freeAfter(ctx, rd)
	return err
}

// freeAfter ends an extend round and frees the op slot once every node has
// answered or the round has ended (its deadline passed or ctx ended), so
// that renewals do not pile up on a slow node. (Replies after that are
// harmless: an extend never shortens a key.)
func (l *Lock) freeAfter(ctx context.Context, rd *round) {
	free := sync.OnceFunc(func() { <-l.op })
	t := time.AfterFunc(time.Until(rd.r.Deadline()), free)
	stop := context.AfterFunc(ctx, free)
	rd.r.FinishThen(nil, func() {
		t.Stop()
		stop()
		free()
	})
}

// Release deletes the lock's token from the nodes (never another token) and
// marks the handle released whatever the outcome. It returns nil once a
// quorum confirmed, ErrReleased if already released (by Release or
// Client.Close: concurrent calls release once), ErrClosed once Close has
// begun, else a *QuorumError matching ErrNotHeld (expired, taken, or nodes
// failed, whose copies expire with the TTL). It ignores ctx's cancellation,
// and waits for an Extend or renewal under way, then at most the node timeout.
func (l *Lock) Release(ctx context.Context) error {
	err := l.release(ctx) // after a renewal under way, which holds l.op
	l.c.renew.Remove(&l.renewal)
	return err
}

func (l *Lock) release(ctx context.Context) error {
	l.op <- struct{}{} // one Extend or Release at a time
	defer func() { <-l.op }()
	l.mu.Lock()
	released := l.life.Released()
	l.mu.Unlock()
	if released {
		return ErrReleased
	}
	if err := l.c.enter(); err != nil {
		return err // Close releases every lock it tracks
	}
	defer l.c.wg.Done()
	return l.releaseLocked(ctx)
}

// releaseLocked releases the lock; l.op and an enter() count (or Close's
// share of the WaitGroup) must be held.
func (l *Lock) releaseLocked(ctx context.Context) error {
	unsure, ask, err := l.endForRelease()
	if err != nil {
		return err
	}
	c, cfg := l.c, l.cfg
	c.untrack(l)
	rd := c.run(context.WithoutCancel(ctx), cfg, send{spec: l.ref().spec, o: l.releaseOp(), l: l, ask: ask})
	l.settleRelease(rd)
	retry := l.releaseRetry(rd, unsure)
	for i, r := range rd.res {
		if r.Err != nil || r.Outcome == OutcomeNotHeld {
			retry(quorum.Reply{Node: i, Result: node.Result{Err: r.Err}})
		}
	}
	for i := range ask {
		if !ask[i] { // deleted in the background (the lock was lost): not ours
			rd.res[i].Outcome = OutcomeNotHeld
		}
	}
	if !rd.won() {
		err = rd.quorumError(l.id.key)
	}
	rd.finish(retry)
	c.unclaim(cfg, l.eachKey, l.id.token)
	l.reportRelease(ctx, rd, err)
	return err
}

// releaseRetry is what Release does with a node's failed answer to its
// round rd, and with one that found nothing. A delete that failed without
// the node's refusal (it may not have reached the node, or was never
// written) is sent again in the background until the node answers; where
// our acquire's fate is unknown (unsure: its SET may still land), also
// while it finds nothing. A delete held back behind a SET that answered
// after the round ended was never sent: late, which saw that answer,
// deletes if it was yes.
func (l *Lock) releaseRetry(rd *round, unsure []bool) func(quorum.Reply) {
	c, cfg := l.c, l.cfg
	return func(rep quorum.Reply) {
		switch {
		case !bugs.HeldResend && rd.lateOwns(rep):
		case rep.Err != nil && !node.Refused(rep.Err):
			if !bugs.HeldResend && (unsure == nil || !unsure[rep.Node]) {
				rep.Err = errDeleteFailed // the acquire answered: nothing of ours lands later
			}
			c.releaseUnsure(cfg, rep.Node, l.ref(), rep.Err)
		case rep.Err == nil && rep.Int == 0 && unsure != nil && unsure[rep.Node]:
			c.releaseUnsure(cfg, rep.Node, l.ref(), errUnknownFate)
		}
	}
}

// reportRelease tells the debug log and the observer how the release
// round rd ended (err).
func (l *Lock) reportRelease(ctx context.Context, rd *round, err error) {
	cfg := l.cfg
	if cfg.Debug(ctx) {
		cfg.Logger.Debug("redlock: released", "key", l.id.key, "took", time.Since(rd.start), "err", err)
	}
	if cfg.Observer != nil {
		e := l.event(time.Since(rd.start), err).withRound(rd)
		e.Context = ctx
		observerOf(cfg).Released(e)
	}
}

// releaseOp is the lock's release command: with a hand-off where the nodes
// keep lines, and taking the lock's waiter out of the line for good if it
// may be in it.
func (l *Lock) releaseOp() node.Op {
	c, cfg := l.c, l.cfg
	o := node.Op{Key: l.id.rkey, Keys: l.id.keyArgs, Token: l.id.token, KeyArg: l.id.keyArg, TokenArg: l.id.tokenArg, Grace: c.grace(cfg)}
	l.leaveArgs(&o)
	return o
}

// settleRelease decides the release round rd and wakes the waiter it
// concerns, if it is one of this Client's.
func (l *Lock) settleRelease(rd *round) {
	c := l.c
	switch {
	case c.handoff:
		// The nodes hand the key to the first waiter and name it; if it
		// is a waiter of this Client, it tries now.
		l.eachKey(func(rkey string) { c.notes.Releasing(rkey, l.id.token) })
		var handed wake.Tally
		for rep, yes, ok := rd.next(); ok; rep, yes, ok = rd.next() {
			if yes {
				handed.Vote(rep.Str)
			}
		}
		if w := handed.Most(); w != "" {
			c.notes.HandedTo(l.id.rkey, l.id.token, w)
		}
	case c.queued:
		// Each node runs the commands of a batch in order: a waiter's SET
		// sent now most likely lands behind our delete, so it may try at
		// once (if it does not, it is told "taken" and waits again).
		l.eachKey(func(rkey string) { c.notes.Released(rkey, l.id.token) })
		rd.settle(nil)
	default:
		rd.settle(nil)
		if rd.won() {
			l.eachKey(func(rkey string) { c.notes.Released(rkey, l.id.token) }) // a waiter of this Client tries now
		}
	}
}

// eachKey calls f with each of the lock's Redis keys.
func (l *Lock) eachKey(f func(rkey string)) {
	if !l.kind.allKeys {
		f(l.id.rkey)
		return
	}
	for _, k := range l.id.keyArgs {
		f(k.(string))
	}
}

// errUnknownFate stands for an acquire command that failed without a reply.
var errUnknownFate = errors.New("the acquire command's fate is unknown")

// endForRelease marks the lock released (lost first, and reported, when its
// deadline has passed unnoticed: a lock is lost the same way whether or not
// its lease was watched; from now on late replies release their node) and
// returns the nodes whose acquire failed without a reply (unsure), and the
// nodes the release round asks (nil: every node): not those whose key a
// background delete already frees (landing.freed), unless the lock's
// waiter may be in the line, which the round takes it out of.
func (l *Lock) endForRelease() (unsure, ask []bool, err error) {
	l.mu.Lock()
	lost, why, err := l.endForReleaseLocked()
	if err != nil {
		l.mu.Unlock()
		return nil, nil, err
	}
	unsure = l.unsureLocked()
	if !l.place.InLine || bugs.LostLeave { // else every node: the round takes its waiter out of the line
		ask = l.unfreedLocked()
	}
	l.mu.Unlock()
	if lost {
		l.c.reportLost(l, why) // the release round that follows deletes its key
		if bugs.LostResend {
			l.c.releaseLost(l)
		}
	}
	return unsure, ask, nil
}

// Held reports whether the lock is still held: its deadline has not passed
// and a quorum of nodes hold its token. It returns false and nil when the
// handle was released, the deadline passed, or enough nodes hold another
// token or none (the lock is then lost); false and a *QuorumError (and
// ctx.Err() if ctx ended first) when too few answered. It writes nothing.
func (l *Lock) Held(ctx context.Context) (bool, error) {
	if l.usable(l.cfg.Now()) != nil {
		return false, nil
	}
	c, cfg := l.c, l.cfg
	if err := c.enterRound(ctx, cfg); err != nil {
		return false, err
	}
	defer c.wg.Done()
	o := node.Op{Key: l.id.rkey, KeyArg: l.id.keyArg}
	l.kind.heldArgs(l, &o)
	rd := c.run(ctx, cfg, send{spec: l.kind.held, o: o, l: l})
	rd.settle(nil)
	defer rd.finish(nil)
	switch {
	case rd.won():
		return l.usable(l.cfg.Now()) == nil, nil
	case rd.gone(): // the token is gone from too many nodes: lost
		l.declareLost("a quorum of nodes no longer hold the token")
		return false, nil
	}
	return false, withCaller(ctx, rd.quorumError(l.id.key))
}

// deadlineLocked is the lock's deadline: its lifetime's, which a session
// lock computes anew from its session while it is held. l.mu must be held.
func (l *Lock) deadlineLocked() time.Time {
	if l.kind.session && l.life.Held() {
		l.life.Recompute(l.hold.Deadline(l.id.acquired, l.cfg.QuorumOf(l.hold.Nodes())))
	}
	return l.life.Deadline()
}

// rearmLocked moves a held lock's lease timer to its deadline, which may
// have moved earlier; l.mu must be held.
func (l *Lock) rearmLocked() {
	l.deadlineLocked()
	l.life.Rearm(l.cfg.Now())
}

// endLocked ends a held lock, lost (sticky: a later release keeps it lost)
// or released, cancelling its lease with the matching cause, and lets go of
// what it kept (letGoLocked). It reports whether the lock was held until
// now. l.mu must be held.
func (l *Lock) endLocked(lost bool) bool {
	held := l.life.End(lost)
	if held {
		l.letGoLocked(lost)
	}
	return held
}

// loseLocked ends a held lock as lost for the reason why ("" when the last
// renewal's failure says it all; lease.Life.Lose), as endLocked(true) does.
// It reports whether the lock was held until now, and the reason. l.mu must
// be held.
func (l *Lock) loseLocked(why string) (bool, string) { return l.lostLocked(l.life.Lose(why)) }

// lostLocked lets go of what a lock that its lifetime just ended as lost
// (lost) kept, and passes lost and why on. l.mu must be held.
func (l *Lock) lostLocked(lost bool, why string) (bool, string) {
	if lost {
		l.letGoLocked(true)
	}
	return lost, why
}

// letGoLocked lets go of what a lock that just ended kept: a lost one's
// place in the Client (its keys expire with their TTL), and its session.
func (l *Lock) letGoLocked(lost bool) {
	if lost {
		l.c.untrack(l)
		l.c.unclaim(l.cfg, l.eachKey, l.id.token)
	}
	if l.kind.session {
		l.hold.Session().Remove((*member)(l))
	}
}

// endForReleaseLocked marks the lock released, lost first (lost, why: to
// be reported) when its deadline has passed unnoticed: a lock is lost the
// same way whether or not its lease was watched. ErrReleased if it was
// released already. l.mu must be held.
func (l *Lock) endForReleaseLocked() (lost bool, why string, err error) {
	if l.life.Released() {
		return false, "", ErrReleased
	}
	l.deadlineLocked()
	lost, why = l.lostLocked(l.life.LoseIfExpired(l.cfg.Now()))
	l.endLocked(false)
	return lost, why, nil
}

// leaveLineHeld leaves the line on the nodes where l, just acquired (before
// late sees its answers), holds the key (said) and whose acquire answered,
// if it may be in the line there: it must not be handed the key it holds.
func (l *Lock) leaveLineHeld(said []bool) {
	if l.place.InLine {
		l.c.leaveLine(l.cfg, l.id.rkey, l.place.Waiter, false, func(i int) bool { return !said[i] && l.answered(i) }, false)
	}
}

// leaveArgs makes o, the lock's release, also take its waiter out of the
// line for good, if it may be in it.
func (l *Lock) leaveArgs(o *node.Op) {
	l.mu.Lock()
	if l.place.InLine {
		o.Waiter, o.LineTTL = l.place.Waiter, l.cfg.StayOut()
	}
	l.mu.Unlock()
}

// newLock makes the Lock of a won acquisition, registers it for Close and
// hands it the acquiring round's late replies; it returns nil when Close has
// begun (the caller rolls back).
func (c *Client) newLock(ctx context.Context, cfg *conf.Config, key string, a *acquisition) *Lock {
	op := a.rd.op
	l := &Lock{c: c, cfg: cfg, op: make(chan struct{}, 1), id: lockID{key: key, rkey: op.Key, token: op.Token, keyArg: op.KeyArg, tokenArg: op.TokenArg, acquired: a.start},
		life: lease.New(drift.Deadline(a.start, cfg.TTL, cfg.DriftFactor))}
	l.renewal.Value = l
	l.kind = a.kind
	a.kind.identify(&l.id, a, op)
	l.land(a.rd.out, a.unsure, op.Kind == node.Resume)
	l.place = wake.Spot{Waiter: a.waiter, InLine: a.inLine}
	if a.kind.fenced {
		l.id.fence = a.fence
	}
	l.hold = session.NewHold(a.sess, a.gens, drift.Deadline(a.start, cfg.KeyTTL(), cfg.DriftFactor))
	if !c.track(l) {
		return nil
	}
	if l.kind.session { // its session renews it from now on
		l.hold.Session().Add((*member)(l), cfg.Observer != nil)
	}
	l.leaveLineHeld(a.said)
	a.rd.finish(l.late)
	if cfg.AutoExtend {
		now := cfg.Now()
		c.renew.Add(&l.renewal, cfg.FirstRenewal(now, l.Deadline(), a.kind.session))
	}
	l.acquiredBy(ctx, a)
	return l
}

// acquiredBy tells the debug log and the Observer that l was acquired by a.
func (l *Lock) acquiredBy(ctx context.Context, a *acquisition) {
	cfg := l.cfg
	if cfg.Debug(ctx) {
		cfg.Logger.Debug("redlock: acquired", "key", l.id.key, "took", a.elapsed, "deadline", l.Deadline())
	}
	if cfg.Observer != nil {
		e := l.event(a.elapsed, nil).withRound(a.rd)
		e.Context, e.Waited, e.Attempts = ctx, a.elapsed, 1
		if a.call != nil {
			e.Call, e.Waited, e.Attempts = a.call.id, time.Since(a.call.begin), a.call.attempts
		}
		observerOf(cfg).Acquired(e)
	}
}

// track registers a new lock for Close; it fails once Close has begun (Close
// has taken its list of locks to release by then). Locks whose deadline has
// passed are forgotten now and then (when the set has doubled since the last
// sweep, or a second has passed), so that locks left to expire are not kept.
func (c *Client) track(l *Lock) bool {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return false
	}
	c.held[l] = struct{}{}
	var all []*Lock
	if len(c.held) >= c.sweepAt || len(c.held) > 64 && time.Since(c.sweptAt) >= time.Second {
		all = slices.Collect(maps.Keys(c.held))
		c.sweepAt, c.sweptAt = max(64, 2*len(c.held)), time.Now()
	}
	c.mu.Unlock()
	if all != nil {
		c.forgetExpired(all)
	}
	return true
}

// forgetExpired forgets the locks among all whose deadline has passed. It
// takes each lock's mu without c.mu (the order elsewhere is l.mu, then
// c.mu).
func (c *Client) forgetExpired(all []*Lock) {
	now := time.Now()
	expired := all[:0]
	for _, l := range all {
		if !now.Before(l.Deadline()) {
			expired = append(expired, l)
		}
	}
	c.mu.Lock()
	for _, l := range expired {
		delete(c.held, l)
	}
	c.mu.Unlock()
	for _, l := range expired {
		c.unclaim(l.cfg, l.eachKey, l.id.token)
	}
	c.mu.Lock()
	c.sweepAt = max(64, 2*len(c.held))
	c.mu.Unlock()
}

func (c *Client) untrack(l *Lock) {
	c.mu.Lock()
	delete(c.held, l)
	c.mu.Unlock()
}
