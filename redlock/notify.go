package redlock

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/internal/quorum"
)

// notifySpread bounds the random delay before a waiter woken by a release
// that named no waiter (learnt from the nodes) tries: the waiters of
// several Clients, woken by one release at once, would otherwise split the
// nodes' votes so that none wins. A release that names a waiter (a hand-off:
// docs/design.md) wakes that waiter alone, at once.
const notifySpread = time.Millisecond

// recentReleases is how many releases per key a notifier counts nodes for,
// and how many waiters named by a release before they registered it keeps.
const recentReleases = 4

// subscriptionLinger is how long a key stays subscribed after its last
// waiter left: a key contended again soon (a process that releases and
// asks again) keeps its subscription instead of waiting for a new one, and
// the releases that come while a waiter's first attempt is in flight reach
// the notifier.
const subscriptionLinger = 10 * time.Second

// notifier wakes Lock calls waiting for a key when the key is released,
// instead of letting them sleep out their retry delay. It learns of
// releases from the nodes (the release script publishes the released token
// and the waiter it handed the key to, if any, on the channel named after
// the key, or, when it handed the key to a waiter, on that waiter's
// Client's channel of the key, so that other Clients read nothing; one
// subscription per node and Client, shared by all its waiters, subscribed
// to both channels of the keys that have or recently had waiters) and
// from this Client's own releases (their replies name the waiter; its own
// first-ranked waiter may try as soon as the release is queued: releasing;
// for Clients without lines, a release wakes a waiter of its own at once).
// A late yes to a failed attempt (split votes) wakes its waiter to try
// after the hand-off grace (splitLate). A
// release wakes one waiter, once a quorum of nodes published it (before
// that, no round can win): the waiter most of them named, also when that
// waiter registers only after the messages came, and again at each later
// message naming it; if they named none, the one that has waited longest
// among those asleep. Once a quorum of nodes confirmed a key's
// subscription, every waiter of the key tries once: a release published
// before that was missed. The others keep polling on their jittered
// schedule, which also covers lost messages (a killed node, a dropped
// connection) and Pools without subscriptions (node.Subscriber is
// optional). All methods are safe for concurrent use.
type notifier struct {
	c  *Client
	mu sync.Mutex
	// keys with waiters, or whose last waiter left less than linger ago.
	keys   map[string]*keyWaiters
	linger time.Duration       // subscriptionLinger; tests set their own
	subs   []node.Subscription // per node, nil where the Pool has none; opened with the first waiter
	opened bool
	closed bool
	// Subscription changes, applied by one goroutine at a time (syncing)
	// so that Lock never waits for them.
	dirty   map[string]struct{}
	syncing bool
	subbed  map[string]bool // keys subscribed on the nodes
	wg      sync.WaitGroup  // the syncing goroutine
	lingers uint64          // linger timers started
	// Wake-ups sent, for tests: by releases, and by subscription
	// confirmations.
	wokenByRelease, wokenBySubscription atomic.Int64
	wokenAgain                          atomic.Int64 // by later nodes of a release that woke the waiter already
	messages                            atomic.Int64 // messages received, on any channel
	wokenEarly                          atomic.Int64 // by releasing, before the nodes named anyone (also in wokenByRelease)
	wokenBySplit                        atomic.Int64 // by a late yes of a failed attempt of theirs (splitLate)
	// Failed attempts of waiters that some nodes said yes to: their
	// roll-back releases those nodes, which hand the key to the next in
	// line there.
	splitAttempts atomic.Int64
}

type keyWaiters struct {
	waiters       []*waiter              // oldest first
	recent        [recentReleases]tally  // nodes that published recent releases
	next          int                    // the slot of recent to reuse
	named         [recentReleases]string // waiters a release named before they registered
	nextNamed     int
	confirmed     int         // confirmations of the key's channel
	confirmedHand int         // confirmations of its hand-off channel (Client.handoff)
	idle          uint64      // not 0: the linger timer running since the last waiter left
	linger        *time.Timer // that timer (nil before the first); stopped by add and close
}

type tally struct {
	token string    // the released token ("" for waiters that left the line)
	nodes int       // nodes that published it; -1: handled
	named handTally // the waiters the nodes handed the key to
	woke  string    // the waiter woken for it, if any
}

type waiter struct {
	id     string             // the waiter's name in the key's line ("": none)
	asleep bool               // in Lock's select; guarded by notifier.mu
	rank   int64              // its rank in the line (0: none); guarded by notifier.mu
	alone  bool               // its last attempt saw no waiters but this Client's; guarded by notifier.mu
	split  time.Time          // its last wake-up by splitLate; guarded by notifier.mu
	shared bool               // a shared holder's (Shared): all of them may take the key at once
	wake   chan time.Duration // capacity 1: the delay before trying
}

// add registers waiter id (its name in the key's line, "" if none) for
// rkey; a key without waiters is subscribed to (in the background). A
// release that named id already wakes it at once. The caller must call
// remove when it stops waiting.
func (n *notifier) add(rkey, id string, shared bool) *waiter {
	w := &waiter{id: id, shared: shared, wake: make(chan time.Duration, 1)}
	n.also(rkey, w)
	return w
}

// also registers w for rkey too: a waiter of several keys (LockAll) is woken
// by a release of any of them. The caller must call remove for each key.
func (n *notifier) also(rkey string, w *waiter) {
	id := w.id
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.keys == nil {
		n.keys = map[string]*keyWaiters{}
	}
	k := n.keys[rkey]
	if k == nil {
		k = &keyWaiters{}
		n.keys[rkey] = k
		n.changedLocked(rkey)
	}
	k.idle = 0
	if k.linger != nil {
		k.linger.Stop()
	}
	k.waiters = append(k.waiters, w)
	if i := slices.Index(k.named[:], id); id != "" && i >= 0 {
		k.named[i] = ""
		n.wake(w, 0, &n.wokenByRelease)
	}
}

// remove unregisters w; the key's last waiter leaves the key subscribed
// for n.linger more.
func (n *notifier) remove(rkey string, w *waiter) {
	n.mu.Lock()
	defer n.mu.Unlock()
	k := n.keys[rkey]
	if k == nil {
		return
	}
	if i := slices.Index(k.waiters, w); i >= 0 {
		k.waiters = slices.Delete(k.waiters, i, i+1)
	}
	if len(k.waiters) > 0 {
		return
	}
	if n.linger <= 0 {
		n.dropLocked(rkey)
		return
	}
	n.lingers++
	gen := n.lingers
	k.idle = gen
	k.linger = time.AfterFunc(n.linger, func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		if n.keys[rkey] == k && k.idle == gen {
			n.dropLocked(rkey)
		}
	})
}

// dropLocked forgets rkey, which has no waiter, and unsubscribes it (in the
// background). n.mu must be held.
func (n *notifier) dropLocked(rkey string) {
	delete(n.keys, rkey)
	n.changedLocked(rkey)
}

// rest marks w, a waiter of rkey, asleep, and notes whether the line its
// last attempt was told of (ln) held only this Client's waiters: no more
// waiters than the key has here.
func (n *notifier) rest(rkey string, w *waiter, ln *line) {
	n.mu.Lock()
	defer n.mu.Unlock()
	w.asleep = true
	if k := n.keys[rkey]; k != nil && ln != nil {
		w.rank, w.alone = ln.rank, ln.seen > 0 && ln.seen <= len(k.waiters)
	}
}

// releasing tells that this Client's release of token is queued on every
// node. If the waiter of rkey here that ranks first saw a line of this
// Client's waiters alone, the nodes are about to hand the key to it
// (waiters who came later rank after it): it tries at once, and its
// acquire lands right behind the release on each node, which runs a
// connection's commands in order. If the nodes name another waiter after
// all, handedTo wakes that one too.
func (n *notifier) releasing(rkey, token string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	k := n.keys[rkey]
	if k == nil {
		return
	}
	var first *waiter
	for _, w := range k.waiters {
		if w.rank > 0 && (first == nil || w.rank < first.rank) {
			first = w
		}
	}
	if first == nil || !first.alone {
		return
	}
	if t := k.slot(token); t.nodes >= 0 && t.woke == "" {
		t.woke = first.id
		n.wake(first, 0, &n.wokenByRelease)
		n.wokenEarly.Add(1)
	}
}

// splitLate tells that a failed attempt of waiter id of rkey took a node
// after all (its yes came late): the votes split, and, if another attempt
// failed too, no release is coming to wake anyone. The waiter tries again
// after delay, once the roll-backs have landed, as it does after a split
// it saw in time (sleeper.delay).
// The waiter must be asleep, and is woken so at most once per retry max
// (a lock held on a bare quorum answers each of its polls with late
// yeses); a release that wakes it during the delay goes first (sleeper.sleep).
func (n *notifier) splitLate(rkey, id string, delay time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	k := n.keys[rkey]
	if k == nil {
		return
	}
	if w := k.find(id); w != nil && w.asleep && time.Since(w.split) >= n.c.cfg.retryMax {
		w.split = time.Now()
		n.wake(w, delay, &n.wokenBySplit)
	}
}

// find returns the waiter named id, or nil. notifier.mu must be held.
func (k *keyWaiters) find(id string) *waiter {
	for _, w := range k.waiters {
		if w.id == id {
			return w
		}
	}
	return nil
}

// sleep marks w as asleep or awake.
func (n *notifier) sleep(w *waiter, asleep bool) {
	n.mu.Lock()
	w.asleep = asleep
	n.mu.Unlock()
}

// released tells the waiters of rkey that this Client released token on a
// quorum: one of them tries at once.
func (n *notifier) released(rkey, token string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	k := n.keys[rkey]
	if k == nil {
		return
	}
	t := k.slot(token)
	if t.nodes >= 0 {
		t.nodes = -1
		n.wakeOneLocked(k, 0)
	}
}

// published counts a node's message for rkey (from its subscription). Once
// a quorum of nodes published a release (before that, no round can win),
// the waiter most of them handed the key to tries at once; if they handed
// it to nobody, one waiter tries after a random delay. (A waiter's attempt
// and a release can cross on a node, so the nodes need not all name the
// same waiter; a Client sees the messages naming its own waiters and those
// naming nobody, and wakes the waiter most of them named once they make a
// quorum. If crossings split a release three ways, nobody is woken: the
// hand-offs lapse within handGrace, and the waiters' polling takes over.)
func (n *notifier) published(rkey, msg string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	k := n.keys[rkey]
	if k == nil {
		return
	}
	token, id, _ := strings.Cut(msg, string(node.Sep))
	if token == "" { // a waiter that stopped waiting handed the key on
		n.handLocked(k, id)
		return
	}
	t := k.slot(token)
	switch {
	case t.woke != "":
		if id == t.woke { // a later node handed it the key too
			n.wakeAgainLocked(k, id)
		}
		return
	case t.nodes < 0:
		return
	}
	t.nodes++
	t.named.vote(quorum.Reply{Result: node.Result{Str: id}}, true)
	if t.nodes < n.c.cfg.quorumOf(len(n.c.pools)) {
		return
	}
	t.nodes = -1
	if id := t.named.most(); id != "" {
		t.woke = id
		n.handLocked(k, id)
		return
	}
	n.wakeOneLocked(k, 1+n.c.cfg.rnd.duration(notifySpread))
}

// wakeAgainLocked makes waiter id of k, woken by a release already, try
// once more if it is asleep again: its attempt may have come to a node
// before the release did there (and failed), and each later node that hands
// it the key is a reason to try again. It counts in wokenAgain, not as a
// wake-up of its own. n.mu must be held.
func (n *notifier) wakeAgainLocked(k *keyWaiters, id string) {
	if w := k.find(id); w != nil {
		n.wake(w, 0, &n.wokenAgain)
	}
}

// handedTo tells that this Client's release of token handed rkey to waiter
// id on most of the nodes that released it: if id is a waiter of this
// Client, it tries at once (and the release's messages wake nobody more),
// unless releasing woke it already.
func (n *notifier) handedTo(rkey, token, id string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	k := n.keys[rkey]
	if k == nil {
		return
	}
	if t := k.slot(token); t.nodes >= 0 && t.woke != id {
		t.nodes, t.woke = -1, id
		n.handLocked(k, id)
	}
}

// handLocked wakes waiter id of k, to which a release handed the key, at
// once, or, if it has not registered yet (its attempt's reply is on its
// way), when it does. n.mu must be held.
func (n *notifier) handLocked(k *keyWaiters, id string) {
	if w := k.find(id); w != nil {
		n.wake(w, 0, &n.wokenByRelease)
		return
	}
	k.named[k.nextNamed] = id
	k.nextNamed = (k.nextNamed + 1) % len(k.named)
}

// message routes a node's message on channel to the key it is about.
func (n *notifier) message(channel, msg string) {
	rkey, _ := n.keyOf(channel)
	n.messages.Add(1)
	n.published(rkey, msg)
}

// confirm routes a node's confirmation of a subscription to channel.
func (n *notifier) confirm(channel string) {
	n.subscribed(n.keyOf(channel))
}

// channels returns the channels rkey's waiters need: the key's own and,
// where the nodes keep lines, the one on which they tell this Client that
// they handed the key to one of its waiters.
func (n *notifier) channels(rkey string) []string {
	if !n.c.handoff {
		return []string{rkey}
	}
	return []string{rkey, node.HandChannel(rkey, n.c.lines.client)}
}

// keyOf returns the key channel is about, and whether it is the key's
// hand-off channel.
func (n *notifier) keyOf(channel string) (rkey string, hand bool) {
	if n.c.handoff {
		if rkey, ok := strings.CutSuffix(channel, n.c.lines.suffix); ok {
			return rkey, true
		}
	}
	return channel, false
}

// subscribed counts a node's confirmation of one of rkey's channels; once
// a quorum of nodes confirmed each, every confirmation wakes every waiter
// of the key once.
func (n *notifier) subscribed(rkey string, hand bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	k := n.keys[rkey]
	if k == nil {
		return
	}
	if hand {
		k.confirmedHand++
	} else {
		k.confirmed++
	}
	q := n.c.cfg.quorumOf(len(n.c.pools))
	if k.confirmed < q || (n.c.handoff && k.confirmedHand < q) {
		return
	}
	for _, w := range k.waiters {
		n.wake(w, 0, &n.wokenBySubscription)
	}
}

// slot returns the tally of the release of token, reusing the oldest slot
// for a new one.
func (k *keyWaiters) slot(token string) *tally {
	for i := range k.recent {
		if k.recent[i].token == token {
			return &k.recent[i]
		}
	}
	t := &k.recent[k.next]
	k.next = (k.next + 1) % len(k.recent)
	*t = tally{token: token}
	return t
}

// wakeOneLocked wakes the oldest sleeping waiter of k, else the oldest (it
// tries once more after its round). n.mu must be held.
func (n *notifier) wakeOneLocked(k *keyWaiters, delay time.Duration) {
	if len(k.waiters) == 0 {
		return
	}
	w := k.waiters[0]
	for _, x := range k.waiters {
		if x.asleep {
			w = x
			break
		}
	}
	n.wake(w, delay, &n.wokenByRelease)
	if w.shared { // shared holders take the key together: wake them all
		for _, x := range k.waiters {
			if x.shared && x.asleep {
				n.wake(x, delay+n.c.cfg.jitter(notifySpread), &n.wokenByRelease)
			}
		}
	}
}

// wake makes w try after delay, unless it was woken already, counting the
// wake-up in count. It never blocks; n.mu must be held.
func (n *notifier) wake(w *waiter, delay time.Duration, count *atomic.Int64) {
	select {
	case w.wake <- delay:
		w.asleep = false
		count.Add(1)
	default: // already woken
	}
}

// changedLocked queues rkey's subscription to follow whether it has
// waiters. n.mu must be held.
func (n *notifier) changedLocked(rkey string) {
	if n.closed {
		return
	}
	if !n.opened {
		n.opened = true
		n.subs = make([]node.Subscription, len(n.c.pools))
		some := false
		// A connection setup gets the time of a background command, which
		// also dials anew: Close stays within its stated bound even where
		// a Pool cannot end a setup early.
		setup := cleanupTimeout(n.c.cfg)
		for i, p := range n.c.pools {
			if s, ok := p.(node.Subscriber); ok {
				n.subs[i] = s.Subscribe(node.Handler{Published: n.message, Subscribed: n.confirm}, setup)
				some = true
			}
		}
		if !some {
			n.subs = nil
		}
	}
	if n.subs == nil {
		return
	}
	if n.dirty == nil {
		n.dirty, n.subbed = map[string]struct{}{}, map[string]bool{}
	}
	n.dirty[rkey] = struct{}{}
	if !n.syncing {
		n.syncing = true
		n.wg.Go(n.sync)
	}
}

// sync applies the queued subscription changes until none is left. A
// failure leaves the waiters to their polling (go-redis resubscribes the
// channels on reconnection).
func (n *notifier) sync() {
	for {
		n.mu.Lock()
		if len(n.dirty) == 0 || n.closed {
			n.syncing = false
			n.mu.Unlock()
			return
		}
		var add, remove []string
		for rkey := range n.dirty {
			want := n.keys[rkey] != nil
			if want != n.subbed[rkey] {
				if want {
					add = append(add, n.channels(rkey)...)
					n.subbed[rkey] = true
				} else {
					remove = append(remove, n.channels(rkey)...)
					delete(n.subbed, rkey)
				}
			}
			delete(n.dirty, rkey)
		}
		subs := n.subs
		n.mu.Unlock()
		for _, s := range subs {
			if s != nil {
				n.apply(s, add, remove)
			}
		}
	}
}

// apply sends one node's subscription changes, bounded by the node timeout
// of its own: a node that does not answer must not use up the time of the
// nodes after it.
func (n *notifier) apply(s node.Subscription, add, remove []string) {
	ctx, cancel := context.WithTimeout(context.Background(), n.c.cfg.nodeTimeout)
	defer cancel()
	if len(add) > 0 {
		_ = s.Add(ctx, add...)
	}
	if len(remove) > 0 {
		_ = s.Remove(ctx, remove...)
	}
}

// close ends the subscriptions, in parallel, and joins their goroutines and
// the syncing one; later waiters only poll. The subscriptions go first: the
// syncing goroutine may be waiting for one of them to finish a connection
// setup, which closing it ends.
func (n *notifier) close() {
	n.mu.Lock()
	n.closed = true
	subs := n.subs
	for _, k := range n.keys {
		if k.linger != nil {
			k.linger.Stop()
		}
	}
	n.mu.Unlock()
	var wg sync.WaitGroup
	for _, s := range subs {
		if s != nil {
			wg.Go(func() { _ = s.Close() })
		}
	}
	wg.Wait()
	n.wg.Wait()
}
