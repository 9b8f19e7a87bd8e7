package wake

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorumlock/quorumlock/internal/node"
)

// Spread bounds the random delay before a waiter woken by a release
// that named no waiter (learnt from the nodes) tries: the waiters of
// several Clients, woken by one release at once, would otherwise split the
// nodes' votes so that none wins. A release that names a waiter (a hand-off:
// docs/design.md) wakes that waiter alone, at once.
const Spread = time.Millisecond

// recentReleases is how many releases per key a Notifier counts nodes for,
// and how many waiters named by a release before they registered it keeps.
const recentReleases = 4

// Linger is how long a key stays subscribed after its last waiter left,
// unless Config says otherwise: a key contended again soon (a process that
// releases and asks again) keeps its subscription instead of waiting for a
// new one, and the releases that come while a waiter's first attempt is in
// flight reach the Notifier.
const Linger = 10 * time.Second

// Config is what a Notifier knows of its Client.
type Config struct {
	Quorum   int           // nodes that must publish a release before it wakes anyone
	Client   string        // the Client's name in the nodes' lines (Names); "" where they keep none
	RetryMax time.Duration // SplitLate wakes a waiter at most once per RetryMax
	// Random returns a duration drawn uniformly from [0, d).
	Random func(d time.Duration) time.Duration
	// Subscribers has one entry per node, nil where the node's Pool has no
	// subscriptions (its waiters poll).
	Subscribers []node.Subscriber
	Setup       time.Duration // a subscription's connection set-up
	Timeout     time.Duration // one node's subscription change
	Linger      time.Duration // Linger when 0; < 0: a key goes with its last waiter
}

// Stats counts a Notifier's work, for tests. Safe for concurrent use.
type Stats struct {
	WokenByRelease      atomic.Int64 // wake-ups sent by releases
	WokenBySubscription atomic.Int64 // by confirmations of a key's subscription
	WokenAgain          atomic.Int64 // by later nodes of a release that woke the waiter already
	Messages            atomic.Int64 // messages received, on any channel
	WokenEarly          atomic.Int64 // by Releasing, before the nodes named anyone (also in WokenByRelease)
	WokenBySplit        atomic.Int64 // by a late yes of a failed attempt of theirs (SplitLate)
	// SplitAttempts counts failed attempts of waiters that some nodes
	// said yes to (the Client counts them): their roll-back releases
	// those nodes, which hand the key to the next in line there.
	SplitAttempts atomic.Int64
}

// Notifier wakes Lock calls waiting for a key when the key is released,
// instead of letting them sleep out their retry delay. It learns of
// releases from the nodes (the release script publishes the released token
// and the waiter it handed the key to, if any, on the channel named after
// the key, or, when it handed the key to a waiter, on that waiter's
// Client's channel of the key, so that other Clients read nothing; one
// subscription per node and Client, shared by all its waiters, subscribed
// to both channels of the keys that have or recently had waiters) and
// from this Client's own releases (their replies name the waiter; its own
// first-ranked waiter may try as soon as the release is queued: Releasing;
// for Clients without lines, a release wakes a waiter of its own at once).
// A late yes to a failed attempt (split votes) wakes its waiter to try
// after the hand-off grace (SplitLate). A
// release wakes one waiter, once a quorum of nodes published it (before
// that, no round can win): the waiter most of them named, also when that
// waiter registers only after the messages came, and again at each later
// message naming it; if they named none, the one that has waited longest
// among those asleep. Once a quorum of nodes confirmed a key's
// subscription, every waiter of the key tries once: a release published
// before that was missed. The others keep polling on their jittered
// schedule, which also covers lost messages (a killed node, a dropped
// connection) and Pools without subscriptions (node.Subscriber is
// optional). docs/design.md, "Waiting", has the mechanism. All methods are
// safe for concurrent use.
type Notifier struct {
	cfg Config
	mu  sync.Mutex
	// keys with waiters, or whose last waiter left less than linger ago.
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
	lingers uint64          // linger timers started

	Stats Stats
}

// New returns the Notifier of a Client; it subscribes to nothing until
// its first waiter comes.
func New(cfg Config) *Notifier {
	if cfg.Linger == 0 {
		cfg.Linger = Linger
	}
	return &Notifier{cfg: cfg}
}

type keyWaiters struct {
	waiters       []*Waiter              // oldest first
	recent        [recentReleases]tally  // nodes that published recent releases
	next          int                    // the slot of recent to reuse
	named         [recentReleases]string // waiters a release named before they registered
	nextNamed     int
	confirmed     int         // confirmations of the key's channel
	confirmedHand int         // confirmations of its hand-off channel (Config.Client)
	idle          uint64      // not 0: the linger timer running since the last waiter left
	linger        *time.Timer // that timer (nil before the first); stopped by add and close
}

type tally struct {
	token string // the released token ("" for waiters that left the line)
	nodes int    // nodes that published it; -1: handled
	named Tally  // the waiters the nodes handed the key to
	woke  string // the waiter woken for it, if any
}

// Waiter is one Lock call waiting for a key (Add): its Wake channel
// says when to try again, after how long.
type Waiter struct {
	id     string             // the waiter's name in the key's line ("": none)
	asleep bool               // in Lock's select; guarded by Notifier.mu
	rank   int64              // its rank in the line (0: none); guarded by Notifier.mu
	alone  bool               // its last attempt saw no waiters but this Client's; guarded by Notifier.mu
	split  time.Time          // its last wake-up by SplitLate; guarded by Notifier.mu
	shared bool               // a shared holder's (Shared): all of them may take the key at once
	wake   chan time.Duration // capacity 1: the delay before trying
}

// Wake delivers, at most once per wake-up, the delay after which the
// waiter should try again.
func (w *Waiter) Wake() <-chan time.Duration { return w.wake }

// Add registers waiter id (its name in the key's line, "" if none) for
// rkey; a key without waiters is subscribed to (in the background). A
// release that named id already wakes it at once. The caller must call
// Remove for each key when it stops waiting.
func (n *Notifier) Add(rkey, id string, shared bool) *Waiter {
	w := &Waiter{id: id, shared: shared, wake: make(chan time.Duration, 1)}
	n.Also(rkey, w)
	return w
}

// Also registers w for rkey too: a waiter of several keys (LockAll) is woken
// by a release of any of them. The caller must call remove for each key.
func (n *Notifier) Also(rkey string, w *Waiter) {
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
		n.wake(w, 0, &n.Stats.WokenByRelease)
	}
}

// Remove unregisters w; the key's last waiter leaves the key subscribed
// for Config.Linger more.
func (n *Notifier) Remove(rkey string, w *Waiter) {
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
	if n.cfg.Linger < 0 {
		n.dropLocked(rkey)
		return
	}
	n.lingers++
	gen := n.lingers
	k.idle = gen
	k.linger = time.AfterFunc(n.cfg.Linger, func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		if n.keys[rkey] == k && k.idle == gen {
			n.dropLocked(rkey)
		}
	})
}

// dropLocked forgets rkey, which has no waiter, and unsubscribes it (in the
// background). n.mu must be held.
func (n *Notifier) dropLocked(rkey string) {
	delete(n.keys, rkey)
	n.changedLocked(rkey)
}

// Rest marks w, a waiter of rkey, asleep, and notes whether the line its
// last attempt was told of (p, nil if none) held only this Client's waiters: no more
// waiters than the key has here.
func (n *Notifier) Rest(rkey string, w *Waiter, p *Place) {
	n.mu.Lock()
	defer n.mu.Unlock()
	w.asleep = true
	if k := n.keys[rkey]; k != nil && p != nil {
		w.rank, w.alone = p.Rank, p.Seen > 0 && p.Seen <= len(k.waiters)
	}
}

// Releasing tells that this Client's release of token is queued on every
// node. If the waiter of rkey here that ranks first saw a line of this
// Client's waiters alone, the nodes are about to hand the key to it
// (waiters who came later rank after it): it tries at once, and its
// acquire lands right behind the release on each node, which runs a
// connection's commands in order. If the nodes name another waiter after
// all, handedTo wakes that one too.
func (n *Notifier) Releasing(rkey, token string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	k := n.keys[rkey]
	if k == nil {
		return
	}
	var first *Waiter
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
		n.wake(first, 0, &n.Stats.WokenByRelease)
		n.Stats.WokenEarly.Add(1)
	}
}

// SplitLate tells that a failed attempt of waiter id of rkey took a node
// after all (its yes came late): the votes split, and, if another attempt
// failed too, no release is coming to wake anyone. The waiter tries again
// after delay, once the roll-backs have landed, as it does after a split
// it saw in time.
// The waiter must be asleep, and is woken so at most once per retry max
// (a lock held on a bare quorum answers each of its polls with late
// yeses); a release that wakes it during the delay goes first.
func (n *Notifier) SplitLate(rkey, id string, delay time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	k := n.keys[rkey]
	if k == nil {
		return
	}
	if w := k.find(id); w != nil && w.asleep && time.Since(w.split) >= n.cfg.RetryMax {
		w.split = time.Now()
		n.wake(w, delay, &n.Stats.WokenBySplit)
	}
}

// find returns the waiter named id, or nil. Notifier.mu must be held.
func (k *keyWaiters) find(id string) *Waiter {
	for _, w := range k.waiters {
		if w.id == id {
			return w
		}
	}
	return nil
}

// Sleep marks w as asleep or awake.
func (n *Notifier) Sleep(w *Waiter, asleep bool) {
	n.mu.Lock()
	w.asleep = asleep
	n.mu.Unlock()
}

// Released tells the waiters of rkey that this Client released token on a
// quorum: one of them tries at once.
func (n *Notifier) Released(rkey, token string) {
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
// hand-offs lapse within the hand-off grace, and the waiters' polling takes over.)
func (n *Notifier) published(rkey, msg string) {
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
	t.named.Vote(id)
	if t.nodes < n.cfg.Quorum {
		return
	}
	t.nodes = -1
	if id := t.named.Most(); id != "" {
		t.woke = id
		n.handLocked(k, id)
		return
	}
	n.wakeOneLocked(k, 1+n.cfg.Random(Spread))
}

// wakeAgainLocked makes waiter id of k, woken by a release already, try
// once more if it is asleep again: its attempt may have come to a node
// before the release did there (and failed), and each later node that hands
// it the key is a reason to try again. It counts in wokenAgain, not as a
// wake-up of its own. n.mu must be held.
func (n *Notifier) wakeAgainLocked(k *keyWaiters, id string) {
	if w := k.find(id); w != nil {
		n.wake(w, 0, &n.Stats.WokenAgain)
	}
}

// HandedTo tells that this Client's release of token handed rkey to waiter
// id on most of the nodes that released it: if id is a waiter of this
// Client, it tries at once (and the release's messages wake nobody more),
// unless Releasing woke it already.
func (n *Notifier) HandedTo(rkey, token, id string) {
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
func (n *Notifier) handLocked(k *keyWaiters, id string) {
	if w := k.find(id); w != nil {
		n.wake(w, 0, &n.Stats.WokenByRelease)
		return
	}
	k.named[k.nextNamed] = id
	k.nextNamed = (k.nextNamed + 1) % len(k.named)
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
func (n *Notifier) wakeOneLocked(k *keyWaiters, delay time.Duration) {
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
	n.wake(w, delay, &n.Stats.WokenByRelease)
	if w.shared { // shared holders take the key together: wake them all
		for _, x := range k.waiters {
			if x.shared && x.asleep {
				n.wake(x, delay+n.jitter(Spread), &n.Stats.WokenByRelease)
			}
		}
	}
}

// jitter returns d/2 plus a random duration up to d/2.
func (n *Notifier) jitter(d time.Duration) time.Duration { return d/2 + n.cfg.Random(d/2+1) }

// wake makes w try after delay, unless it was woken already, counting the
// wake-up in count. It never blocks; n.mu must be held.
func (n *Notifier) wake(w *Waiter, delay time.Duration, count *atomic.Int64) {
	select {
	case w.wake <- delay:
		w.asleep = false
		count.Add(1)
	default: // already woken
	}
}

// Settled reports whether rkey has exactly waiters waiters, all asleep,
// and nodes nodes confirmed each of its channels: for tests that must act
// only once a Notifier is ready to hear a release.
func (n *Notifier) Settled(rkey string, waiters, nodes int) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	k := n.keys[rkey]
	hand := n.cfg.Client == "" || k != nil && k.confirmedHand >= nodes
	if k == nil || len(k.waiters) != waiters || k.confirmed < nodes || !hand {
		return false
	}
	for _, w := range k.waiters {
		if !w.asleep {
			return false
		}
	}
	return true
}
