package integration

// Leader election (Client.Campaign, Leader, Observe; redlock/election.go)
// on real Redis: a leader whose Client stops reaching the nodes (every
// command held in its links, HoldAll) is replaced by a waiting candidate
// after its deadline, with a greater term; Leader and an Observe channel
// report the change in term order; and the old leader's held renewals, and
// a deposed candidate's held acquire, delivered after the new leader took
// over, leave the new leader's key and term intact.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/redlock"
	"github.com/quorumlock/quorumlock/testkit"
)

// electionFence is the fencing counter of election name (default prefix):
// an election's key has a counter of its own (docs/design.md).
func electionFence(name string) string { return rkey(name) + ":fence" }

// electionCounters returns every node's counter of election name ("" when
// absent).
func electionCounters(t *testing.T, admins []*redis.Client, name string) []string {
	t.Helper()
	out := make([]string, len(admins))
	for i, cl := range admins {
		out[i] = get(t, cl, electionFence(name))
	}
	return out
}

// TestElectionFailover: A leads; B campaigns (waiting in the key's line);
// an observer client follows the election. Then everything A's Client
// writes is held in its links (HoldAll): its renewals never arrive, and
// its lease ends. B takes over no earlier than A's deadline, with a term
// above A's; A's Done closes with ErrLockLost; Leader reports B; the
// observer saw A's term and then B's, increasing. When A's held commands
// (renewals, its release of the lost lock) and a third candidate's acquire
// held the same way land after B took over, B's key, its PTTL and the
// counter stay as they were on every node B holds, and Leader still
// reports B with its term.
func TestElectionFailover(t *testing.T) {
	const name, ttl = "elect", time.Second
	c := startCluster(t, ttl, "")
	ctx := ctxT(t, time.Minute)
	admins := c.admins(t)
	t.Cleanup(func() { // before the key TTL check: the counter has no TTL, by design
		for _, cl := range admins {
			_ = cl.Del(context.Background(), electionFence(name)).Err()
		}
	})
	opts := []redlock.Option{redlock.WithTTL(ttl), redlock.WithNodeTimeout(semNodeTimeout)}
	a, pa, _ := c.proxied(t, ctx, "a", opts...)
	cc, pc, _ := c.proxied(t, ctx, "c", opts...)
	lcs := c.warmClients(t, ctx, opts, "b", "observer")
	b, o := lcs[0], lcs[1]

	octx, stopObserving := context.WithCancel(ctx)
	defer stopObserving()
	seen := o.Observe(octx, name)

	la, err := a.Campaign(ctx, name, "A")
	if err != nil {
		t.Fatal(err)
	}
	a.won(la, nil)
	termA := la.Fence()
	if v, term, err := o.Leader(ctx, name); v != "A" || term != termA || err != nil {
		t.Fatalf("Leader = %q, %d, %v; want A, %d", v, term, err, termA)
	}
	type result struct {
		l   *redlock.Lock
		err error
		at  time.Time
	}
	bDone := make(chan result, 1)
	go func() {
		l, err := b.Campaign(ctx, name, "B")
		b.won(l, err)
		bDone <- result{l, err, time.Now()}
	}()
	select { // B waits while A's renewals keep A's key
	case res := <-bDone:
		t.Fatalf("B's Campaign returned (%v, %v) while A leads", res.l, res.err)
	case <-time.After(2 * ttl):
	}
	if err := la.Err(); err != nil {
		t.Fatalf("A, renewed, after 2 TTLs: %v", err)
	}

	for _, p := range pa {
		p.Hold(testkit.HoldAll)
	}
	res := <-bDone
	if res.err != nil {
		t.Fatalf("B's Campaign after A stopped reaching the nodes: %v", res.err)
	}
	lb := res.l
	select {
	case <-la.Done():
	case <-time.After(2 * ttl):
		t.Fatalf("A's Done not closed %v after B took over", 2*ttl)
	}
	if !errors.Is(la.Err(), redlock.ErrLockLost) {
		t.Fatalf("A: Err %v, want ErrLockLost", la.Err())
	}
	if d := la.Deadline(); d.After(res.at) {
		t.Fatalf("B leads %v before A's deadline", d.Sub(res.at))
	}
	termB := lb.Fence()
	if termB <= termA {
		t.Fatalf("B's term %d, not above A's %d", termB, termA)
	}
	if v, term, err := o.Leader(ctx, name); v != "B" || term != termB || err != nil {
		t.Fatalf("Leader = %q, %d, %v; want B, %d", v, term, err, termB)
	}
	var terms []redlock.Leadership
	for len(terms) == 0 || terms[len(terms)-1].Term < termB {
		select {
		case l, ok := <-seen:
			if !ok {
				t.Fatalf("Observe closed after %v", terms)
			}
			terms = append(terms, l)
		case <-time.After(5 * time.Second):
			t.Fatalf("Observe: %v, never B's term %d", terms, termB)
		}
	}
	t.Logf("observed %v; A term %d, B term %d", terms, termA, termB)
	if len(terms) != 2 || terms[0] != (redlock.Leadership{Value: "A", Term: termA}) || terms[1] != (redlock.Leadership{Value: "B", Term: termB}) {
		t.Errorf("Observe sent %v, want A's term %d then B's %d", terms, termA, termB)
	}

	// A third candidate whose acquire is held in its links and gives up.
	for _, p := range pc {
		p.Hold(testkit.HoldAll)
	}
	short, cancel := context.WithTimeout(ctx, 3*semNodeTimeout)
	_, err = cc.Campaign(short, name, "C")
	cancel()
	if err == nil {
		t.Fatal("C's Campaign with every link held succeeded")
	}
	held := 0
	for _, p := range append(pa, pc...) {
		held += p.Held()
	}
	if held == 0 {
		t.Fatal("nothing of A's or C's was held back")
	}
	var on []int
	ms := make([]int64, nodes)
	fences := electionCounters(t, admins, name)
	for i, cl := range admins {
		if get(t, cl, rkey(name)) == lb.Token() {
			on = append(on, i)
			ms[i] = pttl(t, cl, rkey(name))
		}
	}
	if len(on) < nodes/2+1 {
		t.Fatalf("B's token on nodes %v only", on)
	}
	for _, p := range append(pa, pc...) {
		p.Deliver()
	}
	time.Sleep(2 * semNodeTimeout) // the delivered commands run (their replies go nowhere)
	after := electionCounters(t, admins, name)
	for _, i := range on {
		if v := get(t, admins[i], rkey(name)); v != lb.Token() {
			t.Errorf("node%d: %s = %q after A's and C's late commands, want B's %q", i, rkey(name), v, lb.Token())
		}
		// B's renewals may have lengthened it meanwhile; nothing shortens it.
		if p := pttl(t, admins[i], rkey(name)); p <= 0 {
			t.Errorf("node%d: B's key PTTL %dms after the late commands (%dms before)", i, p, ms[i])
		}
		if after[i] != fences[i] {
			t.Errorf("node%d: the election's counter went from %q to %q under B's key", i, fences[i], after[i])
		}
	}
	for i, cl := range admins { // a late renewal never re-creates A's key
		if v := get(t, cl, rkey(name)); v == la.Token() {
			t.Errorf("node%d: %s = A's token after its late renewals landed", i, rkey(name))
		}
	}
	eventually(t, multiLeftover, 10*time.Millisecond, "C's late acquire gone", func() bool {
		return len(tokensIn(t, admins, rkey(name), cc.tokens.failed())) == 0
	})
	if ok, err := lb.Held(ctx); !ok || err != nil {
		t.Fatalf("B: Held = %v, %v after the late commands", ok, err)
	}
	if v, term, err := o.Leader(ctx, name); v != "B" || term != termB || err != nil {
		t.Fatalf("Leader after the late commands = %q, %d, %v; want B, %d", v, term, err, termB)
	}
	if err := lb.Err(); err != nil {
		t.Fatalf("B: %v", err)
	}
	if err := lb.Release(ctx); err != nil {
		t.Fatal(err)
	}
	stopObserving()
	for range seen { // closed once its context ended
	}
}
