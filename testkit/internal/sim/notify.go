package sim

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/quorumlock/quorumlock/internal/node"
)

// The release notifications: a simPool is a node.Subscriber, as the Pools
// of package pool are, so that the Clients' waiters are woken by releases
// and hand-offs (and poll only for what is lost), as in production. A
// subscription confirms its channels a round trip after Add; each message
// a script publishes reaches the subscriptions of its channel after a
// latency, or is lost at the link's drop rate; a node that is down
// publishes nothing, and when it restarts every subscription to it is
// confirmed anew (the Client then retries: it may have missed messages).
// Latencies and losses come from a generator per link apart from the
// commands', so that when a Client subscribes does not change the fates of
// its commands. A schedule must replay although a Client subscribes from
// goroutines of its own, in any order with the nodes' scripts within one
// virtual instant: a change of a subscription takes effect after the
// instant it was made in (what a node publishes in that instant is judged
// by the subscription as it was before), and a confirmation's latency is
// drawn from the channel and when it was asked for, not from the link's
// generator.

var _ node.Subscriber = (*simPool)(nil)

// Subscribe opens a subscription of the pool's client to its node.
func (p *simPool) Subscribe(h node.Handler, _ time.Duration) node.Subscription {
	s := &subscription{p: p, h: h, channels: map[string]subscribed{}}
	p.n.lock()
	p.n.subs = append(p.n.subs, s)
	p.n.unlock()
	return s
}

type subscription struct {
	p *simPool
	h node.Handler

	mu       sync.Mutex
	channels map[string]subscribed
	closed   bool
}

// subscribed is when a channel was added to a subscription and, once it
// was removed, when (zero while it is still wanted).
type subscribed struct{ since, until time.Time }

func (s *subscription) Add(_ context.Context, channels ...string) error {
	now := time.Now()
	s.mu.Lock()
	for _, ch := range channels {
		if e, ok := s.channels[ch]; !ok || !e.until.IsZero() {
			s.channels[ch] = subscribed{since: now}
		}
	}
	s.mu.Unlock()
	s.p.n.lock()
	up := !s.p.n.down
	s.p.n.unlock()
	if up {
		s.confirm(channels)
	}
	return nil
}

// confirm tells the Client, a round trip from now, that channels are
// subscribed (those still wanted then). Each channel's round trip is drawn
// on its own: a Client may ask for channels one by one or together,
// depending on how its goroutines ran, without changing the schedule.
func (s *subscription) confirm(channels []string) {
	for _, ch := range channels {
		time.AfterFunc(s.p.net.confirmation(s.p.client, s.p.n.id, ch), func() {
			s.p.handle(func() {
				if s.has(ch) {
					s.h.Subscribed(ch)
				}
			})
		})
	}
}

// has reports whether ch was subscribed before this instant and not
// removed before it.
func (s *subscription) has(ch string) bool {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.channels[ch]
	return !s.closed && ok && e.since.Before(now) && (e.until.IsZero() || !e.until.Before(now))
}

func (s *subscription) Remove(_ context.Context, channels ...string) error {
	now := time.Now()
	s.mu.Lock()
	for _, ch := range channels {
		if e, ok := s.channels[ch]; ok && e.until.IsZero() {
			e.until = now
			s.channels[ch] = e
		}
	}
	s.mu.Unlock()
	return nil
}

func (s *subscription) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	n := s.p.n
	n.lock()
	n.subs = slices.DeleteFunc(n.subs, func(x *subscription) bool { return x == s })
	n.unlock()
	return nil
}

// handle runs f, an event of a subscription of p's client, now, or at the
// end of the client's stall if it stands still.
func (p *simPool) handle(f func()) {
	if !p.gate.hold(f) {
		f()
	}
}

// resubscribe confirms every channel of s again: its node restarted.
func (s *subscription) resubscribe() {
	s.mu.Lock()
	chs := make([]string, 0, len(s.channels))
	for ch, e := range s.channels {
		if e.until.IsZero() {
			chs = append(chs, ch)
		}
	}
	s.mu.Unlock()
	slices.Sort(chs)
	s.confirm(chs)
}

// publishLocked sends what the last script published to the subscriptions
// of each channel. n's lock is held.
func (n *simNode) publishLocked() {
	for _, m := range n.st.pubs {
		for _, s := range n.subs {
			if !s.has(m.channel) {
				continue
			}
			d := s.p.net.notice(s.p.client, n.id)
			if d < 0 {
				if n.tr.on {
					n.tr.add("message %q on %s to %s lost", short(m.message), printable(m.channel), s.p.client)
				}
				continue
			}
			time.AfterFunc(d, func() {
				if s.p.net.cut(s.p.client, n.id) {
					return
				}
				s.p.handle(func() {
					if s.has(m.channel) {
						if n.tr.on {
							n.tr.add("message %q on %s from %s reaches %s", short(m.message), printable(m.channel), n.name, s.p.client)
						}
						s.h.Published(m.channel, m.message)
					}
				})
			})
		}
	}
	n.st.pubs = n.st.pubs[:0]
}

// printable is a channel's name for the trace.
func printable(s string) string { return strings.ReplaceAll(s, "\x1f", `\x1f`) }

// notice draws the latency of a message on the link, or −1 for a message
// lost.
func (nw *network) notice(client string, nodeID int) time.Duration {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	ls := nw.link(client, nodeID)
	if ls.sub == nil {
		ls.sub = rand.New(rand.NewPCG(nw.seed^0x5b5b, hash(client, nodeID)))
	}
	if ls.sub.Float64() < nw.cfg.pDrop {
		return -1
	}
	return time.Duration(ls.sub.ExpFloat64()*float64(nw.cfg.latency)) + 50*time.Microsecond
}

// confirmation is the latency of a subscription's confirmation of channel
// ch on the link, now: drawn from a generator seeded by the channel and the
// time, so that the confirmations a Client asks for in one instant, from
// several goroutines, get the same latencies in whatever order they come.
func (nw *network) confirmation(client string, nodeID int, ch string) time.Duration {
	h := fnv.New64a()
	h.Write([]byte(ch))
	fmt.Fprint(h, "\x00", time.Since(nw.t0).Nanoseconds())
	r := rand.New(rand.NewPCG(nw.seed^0xc0c0, hash(client, nodeID)^h.Sum64()))
	return time.Duration(r.ExpFloat64()*float64(nw.cfg.latency)) + 50*time.Microsecond
}
