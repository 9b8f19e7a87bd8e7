package integration

// Client.Inspect on real Redis (redlock/inspect.go, internal/scripts/inspect.lua):
// what it reports per node and in summary with nodes cut off and paused,
// and the fencing counter it reads.
//
//	TestInspectUnreachableNodes  one node cut: held, with holder, metadata and TTLs; three down: unknown; released: free
//	TestInspectFenceMatchesLock  a fenced lock's Fence is the Inspection's; a resumed handle changes no counter

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/redlock"
)

// inspectNodeTimeout is the node timeout of the inspecting client: the
// answering nodes must meet it on the busy test machine (see patient).
const inspectNodeTimeout = patient

// inspect calls lc.Inspect(key), fails the test on an error, and checks
// that the call returned within a generous bound of the node timeout: a
// node that does not answer is waited for at most that long.
func inspect(t *testing.T, ctx context.Context, lc *lockClient, key string) *redlock.Inspection {
	t.Helper()
	start := time.Now()
	in, err := lc.Inspect(ctx, key)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("%s: Inspect(%q): %v", lc.name, key, err)
	}
	if bound := inspectNodeTimeout + 2*time.Second; took > bound {
		t.Errorf("%s: Inspect(%q) took %v, more than the node timeout %v plus 2 s", lc.name, key, took, inspectNodeTimeout)
	}
	if in.Key != key || in.RedisKey != rkey(key) || in.Quorum != nodes/2+1 || len(in.Nodes) != nodes {
		t.Errorf("Inspection: Key %q, RedisKey %q, Quorum %d, %d nodes; want %q, %q, %d, %d", in.Key, in.RedisKey, in.Quorum, len(in.Nodes), key, rkey(key), nodes/2+1, nodes)
	}
	for i, n := range in.Nodes {
		if n.Node != fmt.Sprintf("node%d", i) {
			t.Errorf("Inspection.Nodes[%d].Node = %q", i, n.Node)
		}
	}
	t.Logf("%s: Inspect(%q) took %v: state %v, agreed %d, answered %d", lc.name, key, took.Round(time.Millisecond), in.State, in.Agreed, in.Answered)
	return in
}

// checkDown checks that the nodes down reported an error and nothing else.
func checkDown(t *testing.T, in *redlock.Inspection, down []int) {
	t.Helper()
	for _, i := range down {
		n := in.Nodes[i]
		if n.Err == nil || n.Token != "" || n.Metadata != "" || n.TTL != 0 || n.Fence != 0 {
			t.Errorf("unreachable node%d: %+v; want an error and nothing else", i, n)
		}
	}
}

// checkHeldInspection checks an Inspection of l's key while l is held with
// TTL ttl and the nodes down do not answer: the others report l's token
// (its own part), its description and a TTL in (0, ttl]; the summary says
// held by l.
func checkHeldInspection(t *testing.T, in *redlock.Inspection, l *redlock.Lock, ttl time.Duration, down []int) {
	t.Helper()
	own, meta := ownPart(l.Token())
	checkDown(t, in, down)
	for i, n := range in.Nodes {
		if slices.Contains(down, i) {
			continue
		}
		if n.Err != nil || n.Token != own || n.Metadata != meta || n.TTL <= 0 || n.TTL > ttl || n.BadFence {
			t.Errorf("node%d: %+v; want token %q, metadata %q, TTL in (0, %v], no error", i, n, own, meta, ttl)
		}
	}
	up := nodes - len(down)
	if in.State != redlock.StateHeld || in.Holder != own || in.Metadata != meta || in.Agreed != up || in.Answered != up {
		t.Errorf("Inspection: state %v, holder %q (%q), agreed %d, answered %d; want held by %q (%q), %d and %d",
			in.State, in.Holder, in.Metadata, in.Agreed, in.Answered, own, meta, up, up)
	}
}

// TestInspectUnreachableNodes: Inspect through a client whose link to
// node2 is cut (blackholed) reports node2's error after the node timeout,
// and from the four other nodes the holder's token, its metadata
// (WithMetadata) and a TTL in (0, TTL]: held. With nodes 0 and 4 paused
// too, three of five are unreachable and the state is unknown (two nodes
// hold the token: the others might too); nothing is named holder. Healed
// and released, the key is free on every node and Inspect says so.
func TestInspectUnreachableNodes(t *testing.T) {
	const (
		ttl = 5 * time.Second
		key = "inspected"
	)
	c := startCluster(t, ttl, "")
	admins := c.admins(t)
	ctx := ctxT(t, 60*time.Second)
	ps, via := c.proxyEach(t)
	insp := c.newLockClient(t, "inspector", via, redlock.WithTTL(ttl), redlock.WithNodeTimeout(inspectNodeTimeout))
	warm(t, ctx, insp)
	holder := c.warmClients(t, ctx, []redlock.Option{redlock.WithTTL(ttl), redlock.WithNodeTimeout(patient)}, "holder")[0]
	l, err := holder.TryLock(ctx, key, redlock.WithMetadata("host-h"))
	if err != nil {
		t.Fatal(err)
	}
	if l.Metadata() != "host-h" {
		t.Fatalf("Lock.Metadata() = %q, want host-h", l.Metadata())
	}
	eventuallyAll(t, admins, key, l.Token()) // TryLock returned at a quorum
	ps[2].Blackhole(true)
	checkHeldInspection(t, inspect(t, ctx, insp, key), l, ttl, []int{2})

	pauseNodes(t, c, 0, 4)
	in := inspect(t, ctx, insp, key)
	checkDown(t, in, []int{0, 2, 4})
	if in.State != redlock.StateUnknown || in.Holder != "" || in.Metadata != "" || in.Answered != 2 || in.Agreed != 2 {
		t.Errorf("with 3 of 5 unreachable: state %v, holder %q (%q), agreed %d, answered %d; want unknown, no holder, 2 and 2",
			in.State, in.Holder, in.Metadata, in.Agreed, in.Answered)
	}

	for _, i := range []int{0, 4} {
		if err := c.Node(i).Resume(); err != nil {
			t.Fatal(err)
		}
	}
	ps[2].Blackhole(false)
	if err := l.Release(ctx); err != nil {
		t.Fatalf("holder: Release: %v", err)
	}
	eventuallyGone(t, admins, key)
	checkFreeInspection(t, inspect(t, ctx, insp, key))
}

// checkFreeInspection checks an Inspection of a key no node holds, every
// node answering.
func checkFreeInspection(t *testing.T, in *redlock.Inspection) {
	t.Helper()
	for i, n := range in.Nodes {
		if n.Err != nil || n.Token != "" || n.Metadata != "" || n.TTL != 0 {
			t.Errorf("node%d of a free key: %+v; want no token, no TTL, no error", i, n)
		}
	}
	if in.State != redlock.StateFree || in.Holder != "" || in.Agreed != 0 || in.Answered != nodes {
		t.Errorf("Inspection of a free key: state %v, holder %q, agreed %d, answered %d; want free, none, 0, %d",
			in.State, in.Holder, in.Agreed, in.Answered, nodes)
	}
}

// TestInspectFenceMatchesLock: with the nodes' fencing counters at 41, a
// fenced lock's Fence (above 41, rising from holder to holder) equals the
// Inspection's Fence and, each holder having taken every node, every
// node's counter. A Resume of
// the last fenced lock by another client gives a handle whose Fence is 0
// and changes no counter: Inspect still reports the lock's Fence.
func TestInspectFenceMatchesLock(t *testing.T) {
	const (
		ttl = 5 * time.Second
		key = "inspected-fence"
	)
	c := startCluster(t, ttl, "")
	dropFenceCounters(t, c)
	admins := c.admins(t)
	ctx := ctxT(t, 60*time.Second)
	for i, cl := range admins {
		if err := cl.Set(ctx, fenceKey(key), 41, 0).Err(); err != nil {
			t.Fatalf("node%d: seeding the fencing counter: %v", i, err)
		}
	}
	opts := []redlock.Option{redlock.WithTTL(ttl), redlock.WithNodeTimeout(patient)}
	fenced := c.newLockClient(t, "fenced", c.direct, append(opts, redlock.WithFencing(true))...)
	insp := c.warmClients(t, ctx, opts, "inspector")[0]
	var last uint64 = 41
	var l *redlock.Lock
	for round := range 3 {
		var err error
		if l, err = fenced.TryLock(ctx, key); err != nil {
			t.Fatalf("round %d: fenced TryLock: %v", round, err)
		}
		if l.Fence() <= last {
			t.Errorf("round %d: Fence %d, not above the previous %d", round, l.Fence(), last)
		}
		last = l.Fence()
		eventuallyAll(t, admins, key, l.Token()) // TryLock returned at a quorum
		checkFence(t, inspect(t, ctx, insp, key), l.Fence())
		if round < 2 {
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			eventuallyGone(t, admins, key) // the next holder takes every node
		}
	}
	before := countersOf(t, admins, key)
	resumed, err := insp.Resume(ctx, key, l.Token())
	if err != nil {
		t.Fatalf("inspector: Resume of the fenced lock: %v", err)
	}
	if resumed.Fence() != 0 {
		t.Errorf("resumed handle of a lock with Fence %d: Fence %d, want 0", l.Fence(), resumed.Fence())
	}
	checkFence(t, inspect(t, ctx, insp, key), l.Fence())
	if after := countersOf(t, admins, key); !slices.Equal(before, after) {
		t.Errorf("fencing counters before the resume %v, after %v; want them unchanged", before, after)
	}
	if err := resumed.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// checkFence checks an Inspection of a key held on every node by a fenced
// lock whose Fence is fence: every node's counter went up with that lock's
// acquire, to fence.
func checkFence(t *testing.T, in *redlock.Inspection, fence uint64) {
	t.Helper()
	if in.State != redlock.StateHeld || in.Fence != fence {
		t.Errorf("Inspection: state %v, Fence %d; want held, the lock's Fence %d", in.State, in.Fence, fence)
	}
	for i, n := range in.Nodes {
		if n.Err != nil || n.BadFence || n.Fence != fence {
			t.Errorf("node%d: %+v; want the counter %d", i, n, fence)
		}
	}
}

// countersOf returns every node's fencing counter of key.
func countersOf(t *testing.T, admins []*redis.Client, key string) []uint64 {
	t.Helper()
	out := make([]uint64, len(admins))
	for i, cl := range admins {
		out[i] = counterOn(t, cl, key)
	}
	return out
}
