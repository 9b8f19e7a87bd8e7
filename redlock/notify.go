package redlock

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/quorumlock/quorumlock/internal/node"
)

// notifySpread bounds the random delay before a waiter woken by another
// Client's release (learnt from the nodes) tries: the waiters of several
// Clients, woken by one release at once, would otherwise split the nodes'
// votes so that none wins. A release of this Client wakes its own waiter at
// once, ahead of them.
const notifySpread = time.Millisecond

// recentReleases is how many releases per key a notifier counts nodes for.
const recentReleases = 4

// notifier wakes Lock calls waiting for a key when the key is released,
// instead of letting them sleep out their retry delay. It learns of
// releases from this Client's own (Lock.Release: at once, once a quorum of
// nodes confirmed) and from the nodes (the release script publishes the
// released token on the channel named after the key; one subscription per
// node and Client, shared by all its waiters, subscribed to the keys that
// have waiters). A release wakes one waiter of the key, the one that has
// waited longest among those asleep, and only once a quorum of nodes
// published it (before that, no round can win). The others keep polling on
// their jittered schedule, which also covers lost messages (a killed node,
// a dropped connection) and Pools without subscriptions (node.Subscriber
// is optional). All methods are safe for concurrent use.
type notifier struct {
	c  *Client
	mu sync.Mutex
	// keys with waiters; an entry goes with its last waiter.
	keys   map[string]*keyWaiters
	subs   []node.Subscription // per node, nil where the Pool has none; opened with the first waiter
	opened bool
	closed bool
	// Subscription changes, applied by one goroutine at a time (syncing)
	// so that Lock never waits for them.
	dirty   map[string]struct{}
	syncing bool
	subbed  map[string]bool // keys subscribed on the nodes
	wg      sync.WaitGroup  // the syncing goroutine
}

type keyWaiters struct {
	waiters []*waiter             // oldest first
	recent  [recentReleases]tally // nodes that published recent releases
	next    int                   // the slot of recent to reuse
}

type tally struct {
	token string
	nodes int // -1: handled (a local release woke a waiter)
}

type waiter struct {
	asleep bool               // in Lock's select; guarded by notifier.mu
	wake   chan time.Duration // capacity 1: the delay before trying
}

// add registers a waiter for rkey; the key's first waiter subscribes to it
// (in the background). The caller must call remove when it stops waiting.
func (n *notifier) add(rkey string) *waiter {
	w := &waiter{wake: make(chan time.Duration, 1)}
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
	k.waiters = append(k.waiters, w)
	return w
}

// remove unregisters w; the key's last waiter unsubscribes it (in the
// background).
func (n *notifier) remove(rkey string, w *waiter) {
	n.mu.Lock()
	defer n.mu.Unlock()
	k := n.keys[rkey]
	if k == nil {
		return
	}
	for i, x := range k.waiters {
		if x == w {
			k.waiters = append(k.waiters[:i], k.waiters[i+1:]...)
			break
		}
	}
	if len(k.waiters) == 0 {
		delete(n.keys, rkey)
		n.changedLocked(rkey)
	}
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
		k.wakeOne(0)
	}
}

// published counts a node's message for rkey (from its subscription); at a
// quorum of nodes for one token, one waiter tries after a random delay.
func (n *notifier) published(rkey, token string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	k := n.keys[rkey]
	if k == nil {
		return
	}
	t := k.slot(token)
	if t.nodes < 0 {
		return
	}
	t.nodes++
	if t.nodes == n.c.cfg.quorumOf(len(n.c.pools)) {
		k.wakeOne(1 + rand.N(notifySpread))
	}
}

// slot returns the tally of token, reusing the oldest slot for a new one.
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

// wakeOne wakes the oldest sleeping waiter, else the oldest (it tries once
// more after its round). It never blocks.
func (k *keyWaiters) wakeOne(delay time.Duration) {
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
	select {
	case w.wake <- delay:
		w.asleep = false
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
				n.subs[i] = s.Subscribe(func(channel, message string) { n.published(channel, message) }, setup)
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
					add = append(add, rkey)
					n.subbed[rkey] = true
				} else {
					remove = append(remove, rkey)
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
