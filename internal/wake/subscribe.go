package wake

import (
	"context"
	"strings"
	"sync"

	"github.com/quorumlock/quorumlock/internal/node"
)

// A Notifier's subscriptions: one per node, shared by all its waiters,
// subscribed to the channels of the keys that have or recently had
// waiters; changes are applied by one goroutine at a time, so that Lock
// never waits for them.

// message routes a node's message on channel to the key it is about.
func (n *Notifier) message(channel, msg string) {
	rkey, _ := n.keyOf(channel)
	n.Stats.Messages.Add(1)
	n.published(rkey, msg)
}

// confirm routes a node's confirmation of a subscription to channel.
func (n *Notifier) confirm(channel string) {
	n.subscribed(n.keyOf(channel))
}

// channels returns the channels rkey's waiters need: the key's own and,
// where the nodes keep lines, the one on which they tell this Client that
// they handed the key to one of its waiters.
func (n *Notifier) channels(rkey string) []string {
	if n.cfg.Client == "" {
		return []string{rkey}
	}
	return []string{rkey, node.HandChannel(rkey, n.cfg.Client)}
}

// keyOf returns the key channel is about, and whether it is the key's
// hand-off channel.
func (n *Notifier) keyOf(channel string) (rkey string, hand bool) {
	if n.cfg.Client != "" {
		if rkey, ok := strings.CutSuffix(channel, node.HandChannel("", n.cfg.Client)); ok {
			return rkey, true
		}
	}
	return channel, false
}

// subscribed counts a node's confirmation of one of rkey's channels; once
// a quorum of nodes confirmed each, every confirmation wakes every waiter
// of the key once.
func (n *Notifier) subscribed(rkey string, hand bool) {
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
	q := n.cfg.Quorum
	if k.confirmed < q || (n.cfg.Client != "" && k.confirmedHand < q) {
		return
	}
	for _, w := range k.waiters {
		n.wake(w, 0, &n.Stats.WokenBySubscription)
	}
}

// changedLocked queues rkey's subscription to follow whether it has
// waiters. n.mu must be held.
func (n *Notifier) changedLocked(rkey string) {
	if n.closed {
		return
	}
	if !n.opened {
		n.opened = true
		n.subs = make([]node.Subscription, len(n.cfg.Subscribers))
		some := false
		// A connection setup gets the time of a background command, which
		// also dials anew: Close stays within its stated bound even where
		// a Pool cannot end a setup early.
		for i, s := range n.cfg.Subscribers {
			if s != nil {
				n.subs[i] = s.Subscribe(node.Handler{Published: n.message, Subscribed: n.confirm}, n.cfg.Setup)
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
func (n *Notifier) sync() {
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
func (n *Notifier) apply(s node.Subscription, add, remove []string) {
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.Timeout)
	defer cancel()
	if len(add) > 0 {
		_ = s.Add(ctx, add...)
	}
	if len(remove) > 0 {
		_ = s.Remove(ctx, remove...)
	}
}

// Close ends the subscriptions, in parallel, and joins their goroutines and
// the syncing one; later waiters only poll. The subscriptions go first: the
// syncing goroutine may be waiting for one of them to finish a connection
// setup, which closing it ends.
func (n *Notifier) Close() {
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
