package redlock

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/internal/redisproc"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/redis/go-redis/v9"
)

// Hand-off tests run on real Redis servers: whether a release's message
// reaches the one waiter it names is a matter of delivery. Their Clients
// poll once a minute: a waiter that gets the lock within the test was woken
// by a release (or by its key's subscription being confirmed), never by
// its retry timer, so a lost wake-up fails the test by its deadline.

// realClients returns n Clients over the servers of cl, each with pools of
// its own (as separate processes would have), polling once a minute.
func realClients(t *testing.T, cl redisproc.Servers, n int) []*Client {
	t.Helper()
	var cs []*Client
	for range n {
		cs = append(cs, realClient(t, cl.Addrs(), true, nil))
	}
	return cs
}

// realClient returns a Client over the servers at addrs, polling once a
// minute; with subscribe false, its Pools deliver no release messages
// (node.Subscriber hidden), so only its own releases and late replies wake
// its waiters. Its links to the nodes slow names are slow: every write to
// node i waits slow[i] first.
func realClient(t *testing.T, addrs []string, subscribe bool, slow map[int]time.Duration) *Client {
	t.Helper()
	{
		var pools []pool.Pool
		for i, addr := range addrs {
			rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1,
				Dialer: slowDialer(slow[i])})
			t.Cleanup(func() { _ = rdb.Close() })
			p, err := pool.New(rdb, pool.WithName(fmt.Sprintf("node%d", i)))
			if err != nil {
				t.Fatal(err)
			}
			if !subscribe {
				p = unsubscribed{p, p.(node.Sender)}
			}
			pools = append(pools, p)
		}
		c, err := New(pools, testNodeTimeout, WithRetryBackoff(time.Minute, time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		if !c.handoff {
			t.Fatal("a Client over Pools of package pool keeps no lines")
		}
		return c
	}
}

// heldK starts five servers and four Clients over them, the first of
// which holds "k"; it returns the servers, that lock, the three other
// Clients and a context that ends after two minutes.
func heldK(t *testing.T) (redisproc.Servers, *Lock, []*Client, context.Context) {
	t.Helper()
	cl := redisproc.Start(t, 5)
	cs := realClients(t, cl, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	l, err := cs[0].TryLock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	return cl, l, cs[1:], ctx
}

// wakes sums the wake-ups the Clients' notifiers sent, by releases and by
// subscription confirmations.
func wakes(cs []*Client) (byRelease, bySubscription int64) {
	for _, c := range cs {
		byRelease += c.notes.Stats.WokenByRelease.Load()
		bySubscription += c.notes.Stats.WokenBySubscription.Load()
	}
	return byRelease, bySubscription
}

// wakeStats says, per Client, how its waiters were woken and how many of
// their attempts split: what a stalled waiter's report needs.
func wakeStats(cs []*Client) string {
	var b strings.Builder
	for i, c := range cs {
		st := &c.notes.Stats
		fmt.Fprintf(&b, "client %d: %d messages; woken by release %d (early %d, again %d), by subscription %d, by a late split %d; %d split attempts\n",
			i, st.Messages.Load(), st.WokenByRelease.Load(), st.WokenEarly.Load(), st.WokenAgain.Load(),
			st.WokenBySubscription.Load(), st.WokenBySplit.Load(), st.SplitAttempts.Load())
	}
	return b.String()
}

// settled reports whether c has want waiters of rkey, all asleep, and every
// node confirmed its subscription to the key.
func settled(c *Client, rkey string, want int) bool {
	return c.notes.Settled(rkey, want, len(c.pools))
}

// dumpLine describes rkey and its line on every node of cl.
func dumpLine(cl redisproc.Servers, rkey string) string {
	var b strings.Builder
	for i, addr := range cl.Addrs() {
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		defer rdb.Close()
		ctx := context.Background()
		v, _ := rdb.Get(ctx, rkey).Result()
		pttl, _ := rdb.PTTL(ctx, rkey).Result()
		q, _ := rdb.ZRangeWithScores(ctx, rkey+"\x1fq", 0, -1).Result()
		x, _ := rdb.ZRangeWithScores(ctx, rkey+"\x1fx", 0, -1).Result()
		fmt.Fprintf(&b, "node%d: %q (%v) line %v lapses %v\n", i, v, pttl, q, x)
	}
	return b.String()
}

// waitFor polls cond until it holds, failing the test after a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(time.Minute); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestHandOffWakesExactlyOneAcrossClients: three Clients with two waiters
// each wait for a key another Client holds. Each release wakes exactly one
// waiter across all the Clients, the one that asked first, which then gets
// the lock: six releases, six wake-ups, the waiters served in the order
// they asked.
func TestHandOffWakesExactlyOneAcrossClients(t *testing.T) {
	_, first, waiters, ctx := heldK(t)
	var (
		mu     sync.Mutex
		served []int
		wg     sync.WaitGroup
	)
	for i := range 6 {
		c := waiters[i%len(waiters)]
		wg.Go(func() {
			l, err := c.Lock(ctx, "k")
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			mu.Lock()
			served = append(served, i)
			mu.Unlock()
			if err := l.Release(ctx); err != nil {
				t.Errorf("waiter %d: release: %v", i, err)
			}
		})
		// The next waiter asks once this one is in line and asleep.
		waitFor(t, fmt.Sprintf("waiter %d to sleep", i), func() bool { return settled(c, rkey("k"), i/len(waiters)+1) })
	}
	cs := append([]*Client{first.c}, waiters...)
	rel0, sub0 := wakes(cs)
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	rel, sub := wakes(cs)
	if got := rel - rel0; got != 6 {
		t.Errorf("6 releases with waiters woke %d waiters across the Clients; want exactly 6", got)
	}
	if sub != sub0 {
		t.Errorf("%d wake-ups by subscription confirmations after every subscription was confirmed", sub-sub0)
	}
	if want := []int{0, 1, 2, 3, 4, 5}; !slices.Equal(served, want) {
		t.Errorf("waiters served in the order %v; want the order they asked in, %v", served, want)
	}
}

// TestHandOffMessageReachesOnlyTheNamedClient: three Clients wait for a key
// with one waiter each. A release that hands the key to a waiter is told to
// that waiter's Client alone, one message per node, and the Clients not
// named receive nothing: the cost of a release does not grow with the
// number of waiting processes.
func TestHandOffMessageReachesOnlyTheNamedClient(t *testing.T) {
	cl, l, waiters, ctx := heldK(t)
	got := make(chan *Lock)
	for i, c := range waiters {
		go func() {
			l, err := c.Lock(ctx, "k")
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
			}
			got <- l
		}()
		waitFor(t, fmt.Sprintf("waiter %d to sleep", i), func() bool { return settled(c, rkey("k"), 1) })
	}
	c0 := waiters[0]
	judged := 0
	for turn, next := range waiters {
		before := make([]int64, len(waiters))
		for i, c := range waiters {
			before[i] = c.notes.Stats.Messages.Load()
		}
		splits := next.notes.Stats.SplitAttempts.Load()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if l = <-got; l == nil {
			t.FailNow()
		}
		if l.c != next {
			t.Fatalf("turn %d: the lock went to another Client than the one that asked first", turn)
		}
		// A quorum of nodes published before the lock could be won. (The
		// lock released may hold fewer than all nodes: an attempt that
		// came to a node before the release there is told "taken".)
		q := int64(c0.cfg.QuorumOf(len(cl.Addrs())))
		waitFor(t, "the named Client's messages", func() bool { return next.notes.Stats.Messages.Load()-before[turn] >= q })
		time.Sleep(50 * time.Millisecond)
		// An attempt of the named waiter that failed with some nodes' yes
		// (woken by the first nodes' messages, it reached the others
		// before their release) rolled back: those nodes handed the key
		// to the next in line, rightly. Such a turn is not judged.
		clean := next.notes.Stats.SplitAttempts.Load() == splits
		if clean {
			judged++
		} else {
			t.Logf("turn %d: the named waiter's first attempt split and rolled back; not judged", turn)
		}
		for i, c := range waiters {
			n := c.notes.Stats.Messages.Load() - before[i]
			switch {
			case i == turn && (n < q || n > int64(len(cl.Addrs()))):
				t.Errorf("turn %d: the named Client received %d messages; want one per node that released, at least %d", turn, n, q)
			case i != turn && n != 0 && clean:
				t.Errorf("turn %d: waiting Client %d, not named, received %d messages", turn, i, n)
			}
		}
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if judged == 0 {
		t.Error("every turn's first attempt split: nothing was judged")
	}
}

// TestOwnWaiterTriesBehindTheRelease: a Client's own waiter, alone in the
// key's line, is woken as soon as the Client's release is queued (its
// acquire lands right behind the release), before the nodes have answered;
// with another Client's waiter ahead of it in the line, it is not, and the
// release wakes only that one. Either way one release, one wake-up.
func TestOwnWaiterTriesBehindTheRelease(t *testing.T) {
	cl := redisproc.Start(t, 5)
	cs := realClients(t, cl, 2)
	a, b := cs[0], cs[1]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	wait := func(c *Client, n int) <-chan *Lock {
		got := make(chan *Lock, 1)
		go func() {
			l, err := c.Lock(ctx, "k")
			if err != nil {
				t.Error(err)
			}
			got <- l
		}()
		waitFor(t, "the waiter to sleep", func() bool { return settled(c, rkey("k"), n) })
		return got
	}
	release := func(l *Lock) {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}

	held, err := a.TryLock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	own := wait(a, 1)
	release(held)
	held = <-own
	if held == nil {
		t.FailNow()
	}
	if early, all := a.notes.Stats.WokenEarly.Load(), a.notes.Stats.WokenByRelease.Load(); early != 1 || all != 1 {
		t.Errorf("alone in the line: %d early wake-ups, %d in all; want 1 and 1", early, all)
	}

	other := wait(b, 1) // first in the line
	own = wait(a, 1)
	release(held)
	if l := <-other; l == nil || l.c != b {
		t.Fatal("the release did not go to the waiter ahead in the line")
	} else {
		release(l)
	}
	if l := <-own; l != nil {
		release(l)
	}
	if early := a.notes.Stats.WokenEarly.Load(); early != 1 {
		t.Errorf("behind another Client's waiter: %d early wake-ups in all; want still 1", early)
	}
	if rel, _ := wakes(cs); rel != 3 {
		t.Errorf("3 releases with waiters woke %d waiters; want 3", rel)
	}
}

// TestSplitLateYesRetries: a waiter's attempt meets a key held on a bare
// quorum (nodes 0 to 2) and takes the two other nodes, whose yes comes late
// (their links are slow): the attempt fails, rolls back, and the waiter
// sleeps in the line. The old holder's keys then expire without a release
// (its process died): nothing will wake the waiter but its late yes, which
// makes it try again within the hand-off grace instead of at its next poll
// (a minute here; the Client subscribes to no messages, which would wake it
// too). Without it, the Lock call waits for its deadline.
func TestSplitLateYesRetries(t *testing.T) {
	cl := redisproc.Start(t, 5)
	slow := map[int]time.Duration{3: 200 * time.Millisecond, 4: 200 * time.Millisecond}
	c := realClient(t, cl.Addrs(), false, slow)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i, rdb := range cl.Clients(t)[:3] { // a holder that dies: no release
		if err := rdb.Set(ctx, rkey("k"), "gone", 1500*time.Millisecond).Err(); err != nil {
			t.Fatalf("node%d: %v", i, err)
		}
	}
	l, err := c.Lock(ctx, "k")
	if err != nil {
		t.Fatalf("Lock after the old holder's keys expired: %v", err)
	}
	defer l.Release(ctx)
	if got := c.notes.Stats.WokenBySplit.Load(); got < 1 {
		t.Errorf("the Lock call got the key without a late yes waking it (%d)", got)
	}
}

// slowDialer returns a go-redis Dialer whose connections wait d before
// every write (nil for d == 0: go-redis's own dialer).
func slowDialer(d time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	if d == 0 {
		return nil
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var dl net.Dialer
		c, err := dl.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return slowConn{c, d}, nil
	}
}

// slowConn is a connection whose writes each wait d: a slow link.
type slowConn struct {
	net.Conn
	d time.Duration
}

func (c slowConn) Write(b []byte) (int, error) {
	time.Sleep(c.d)
	return c.Conn.Write(b)
}

// unsubscribed is a Pool of package pool without its node.Subscriber.
type unsubscribed struct {
	pool.Pool
	node.Sender
}

// TestNoLostWakeUp: two Clients take turns on one key, each asking again
// right after it releases, as two processes contending for a lock do.
// Every turn comes from a wake-up (they poll once a minute): none is lost,
// and no release wakes more than one waiter.
func TestNoLostWakeUp(t *testing.T) {
	cl := redisproc.Start(t, 5)
	cs := realClients(t, cl, 2)
	const turns = 150
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	releases := make([]int, len(cs))
	begin := time.Now()
	for i, c := range cs {
		wg.Go(func() {
			for range turns {
				// Well below the minute between polls: a turn that waits
				// for its retry timer fails.
				lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				l, err := c.Lock(lctx, "k")
				cancel()
				if err != nil {
					t.Errorf("client %d after %d turns: %v\n%s%s", i, releases[i], err, dumpLine(cl, rkey("k")), wakeStats(cs))
					return
				}
				time.Sleep(time.Millisecond)
				if err := l.Release(ctx); err != nil {
					t.Errorf("client %d: release: %v", i, err)
					return
				}
				releases[i]++
			}
		})
	}
	wg.Wait()
	rel, sub := wakes(cs)
	total := releases[0] + releases[1]
	t.Logf("%d releases in %v, %d wake-ups by releases, %d by subscription confirmations", total, time.Since(begin).Round(time.Millisecond), rel, sub)
	if rel > int64(total) {
		t.Errorf("%d releases woke %d waiters: more than one per release", total, rel)
	}
}
