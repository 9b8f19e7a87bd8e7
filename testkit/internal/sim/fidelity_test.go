package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/internal/redisproc"
)

// TestScriptsAgreeWithRedis runs the same random sequence of the library's
// commands (every node.Kind, waiters and hand-offs, sessions, fencing, locks
// of several keys, shared holders, semaphores' permits) on a
// real redis-server and on a simulated node, and requires the same reply
// to each and the same keys, values and types after each: the simulator's
// store and Lua bridge are Redis as far as the scripts can tell. TTLs are
// long, so that no key expires between the two runs of a command (expiry
// is TestStoreExpiry's).
func TestScriptsAgreeWithRedis(t *testing.T) {
	srv := redisproc.Start(t, 1)[0]
	cl := redisproc.NewClient(srv.Addr(), "")
	defer cl.Close()
	ctx := context.Background()
	t0 := time.Now()
	n := newNode(0, 1, t0, &tracer{})
	n.base = t0.UnixNano() // the lines' lapse times are read on each server's clock
	r := rand.New(rand.NewPCG(3, 4))
	yes := map[node.Kind]int{} // the shared holders' and permits' commands that answered 1
	for i := range 4000 {
		op := randomOp(r)
		want := runReal(ctx, cl, op)
		if want.Err == nil && want.Int == 1 {
			yes[op.Kind]++
		}
		n.lock()
		got := n.execLocked(op)
		n.unlock()
		if !sameResult(op, got, want) {
			t.Fatalf("command %d (%s): simulated node answered %+v, Redis %+v", i, describe(op), got, want)
		}
		if i%50 == 0 || got.Err != nil {
			compareKeyspaces(t, ctx, cl, n, i, op)
		}
	}
	if fs := n.tr.failures(); len(fs) > 0 {
		t.Fatalf("script errors: %q", fs)
	}
	for _, k := range []node.Kind{node.AcquireShared, node.ExtendShared, node.ReleaseShared, node.HeldShared, node.AcquirePermit, node.ExtendPermit} {
		if yes[k] == 0 {
			t.Errorf("no %s answered 1: the shared holders' or permits' scripts were not compared where they change keys", kindNames[k])
		}
	}
	t.Logf("shared and permit commands that answered 1: %d ACQUIRE-SHARED, %d EXTEND-SHARED, %d RELEASE-SHARED, %d HELD-SHARED, %d ACQUIRE-PERMIT, %d EXTEND-PERMIT",
		yes[node.AcquireShared], yes[node.ExtendShared], yes[node.ReleaseShared], yes[node.HeldShared], yes[node.AcquirePermit], yes[node.ExtendPermit])
}

// sameResult compares two answers to op: exactly, but for an Inspect's TTL
// (ms on each server's clock), which may differ by the time between the two
// runs.
func sameResult(op *node.Op, got, want node.Result) bool {
	if op.Kind == node.Inspect && got.Err == nil && want.Err == nil {
		g, gerr := node.ParseInspect(got.Str)
		w, werr := node.ParseInspect(want.Str)
		d := g.TTL - w.TTL
		g.TTL, w.TTL = 0, 0
		return gerr == nil && werr == nil && reflect.DeepEqual(g, w) && d < time.Second && d > -time.Second
	}
	return fmt.Sprint(got.Int, got.Str, got.Err != nil) == fmt.Sprint(want.Int, want.Str, want.Err != nil)
}

func runReal(ctx context.Context, cl *redis.Client, op *node.Op) node.Result {
	cmd := op.Cmd(ctx)
	_ = cl.Process(ctx, cmd)
	res := op.Result(cmd)
	if node.NoScript(res) {
		res = op.Eval(ctx, cl)
	}
	return res
}

// randomOp draws one command over a few keys, tokens and waiters.
func randomOp(r *rand.Rand) *node.Op {
	pick := func(xs ...string) string { return xs[r.IntN(len(xs))] }
	key := pick("p:{a}", "p:{b}")
	o := node.Op{Key: key, Token: pick("tokenAAAAAAAAAAAAA1", "tokenBBBBBBBBBBBBBB2", "tokenCCCCCCCCCCCCCC3"), TTL: time.Duration(5+r.IntN(20)) * time.Second}
	switch r.IntN(27) {
	case 0, 1:
		o.Kind = node.Acquire
	case 2:
		o.Kind, o.FenceKey = node.AcquireFenced, "p:{"+key[3:4]+"}:fence"
	case 3:
		o.Kind, o.FenceKey, o.Fence = node.RaiseFence, "p:{"+key[3:4]+"}:fence", uint64(r.IntN(30))
	case 4:
		o.Kind = node.Extend
	case 5:
		o.Kind = node.Release
		if r.IntN(2) == 0 {
			o.Grace, o.Waiter, o.LineTTL = 5*time.Second, pick("", "w1.x", "w2.y"), 30*time.Second
		}
	case 6:
		o.Kind, o.Token = node.Get, ""
	case 7:
		o.Kind, o.Token = node.Peek, ""
	case 8:
		o.Kind, o.Waiter, o.Grace, o.LineTTL, o.Tell, o.Token = node.Leave, pick("w1.x", "w2.y", "w3.z"), 5*time.Second, 30*time.Second, r.IntN(2) == 0, ""
	case 10:
		o.Kind = node.Resume
	case 11:
		o.Kind, o.Token, o.FenceKey = node.Inspect, "", "p:{"+key[3:4]+"}:fence"
	case 9:
		o.Kind, o.Session, o.Seq, o.KeyTTL, o.PrefixLen = node.AcquireSession, "p:s:"+o.Token[:16], "p:s:seq", 60*time.Second, 2
	case 12:
		o.Kind, o.Key, o.Token = node.RenewSession, "p:s:"+o.Token[:16], pick("1", "2", "3")
	case 13, 14: // a lock of several keys (some of them alone), fenced or not
		o.Kind, o.Keys = node.AcquireAll, someKeys(r)
		if r.IntN(2) == 0 {
			o.FenceKey = "p:fence" // the shared counter: the keys' own are folded in
		}
	case 15:
		o.Kind, o.Keys = node.ReleaseAll, someKeys(r)
		if r.IntN(2) == 0 {
			o.Grace = 5 * time.Second // hand each key to its line's first waiter
		}
	case 16:
		o.Kind, o.Keys = node.HeldAll, someKeys(r)
	case 17, 18: // a shared holder joins (or finds the key taken)
		o.Kind = node.AcquireShared
	case 19:
		o.Kind = node.ExtendShared
	case 20:
		o.Kind = node.ReleaseShared
		if r.IntN(2) == 0 {
			o.Grace = 5 * time.Second // hand the key, once no holder is left, to its line's first waiter
		}
	case 21:
		o.Kind = node.HeldShared
	case 23, 24: // a permit of a semaphore of 1 or 2 (another count: refused while one is declared)
		o.Kind, o.Permits = node.AcquirePermit, 1+r.IntN(2)
		o.Slot, o.Keys = r.IntN(o.Permits), []any{"p:{c}\x1fk"}
		for i := range o.Permits {
			o.Keys = append(o.Keys, fmt.Sprintf("p:{c}\x1fp%d", i))
		}
	case 25:
		o.Kind, o.Permits, o.FenceKey = node.ExtendPermit, 1+r.IntN(2), "p:{c}\x1fk"
		o.Key = fmt.Sprintf("p:{c}\x1fp%d", r.IntN(o.Permits))
	case 26: // a permit's release
		o.Kind, o.Key = node.Release, fmt.Sprintf("p:{c}\x1fp%d", r.IntN(2))
	default: // the extend and the fencing write-back of a lock of several keys, or a batch of locks
		o.Keys = someKeys(r)
		if r.IntN(2) == 0 {
			o.Kind, o.FenceKey, o.Fence = node.RaiseFence, "p:fence", uint64(r.IntN(30))
			break
		}
		o.Kind = node.ExtendMany
		for range o.Keys {
			tok := o.Token // one lock's keys, or (1 in 3) each its own
			if r.IntN(3) == 0 {
				tok = pick("tokenAAAAAAAAAAAAA1", "tokenBBBBBBBBBBBBBB2", "tokenCCCCCCCCCCCCCC3")
			}
			o.Tokens = append(o.Tokens, tok)
		}
	}
	switch {
	case o.Kind == node.AcquirePermit: // its own key is its permit's; Keys[0] the count key
		o.Key = o.Keys[1+o.Slot].(string)
	case len(o.Keys) > 0:
		o.Key = o.Keys[0].(string)
	}
	if (o.Kind == node.Acquire || o.Kind == node.AcquireFenced) && r.IntN(2) == 0 {
		o.Waiter, o.Rank, o.LineTTL, o.InLine = pick("w1.x", "w2.y", "w3.z"), int64(r.IntN(5)), 30*time.Second, r.IntN(2) == 0
	}
	return node.New(o)
}

// someKeys draws one to three of the keys, in a random order.
func someKeys(r *rand.Rand) []any {
	keys := []any{"p:{a}", "p:{b}", "p:{c}"}
	r.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	return keys[:1+r.IntN(len(keys))]
}

func describe(op *node.Op) string { return fmt.Sprintf("%s %q", kindNames[op.Kind], op.Args) }

// compareKeyspaces requires the same keys with the same values (strings)
// or members and scores (sorted sets), and TTLs within a second.
func compareKeyspaces(t *testing.T, ctx context.Context, cl *redis.Client, n *simNode, i int, op *node.Op) {
	t.Helper()
	real, err := cl.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	n.lock()
	defer n.unlock()
	now := n.now()
	var sim []string
	for k := range n.st.keys {
		if n.st.live(k, now) != nil {
			sim = append(sim, k)
		}
	}
	slices.Sort(real)
	slices.Sort(sim)
	if !slices.Equal(real, sim) {
		t.Fatalf("after command %d (%s): Redis has keys %q, the simulated node %q", i, describe(op), real, sim)
	}
	for _, k := range real {
		v := n.st.keys[k]
		var want, got string
		if v.zset != nil {
			// Members in order; scores equal, but for lapse times (ms on
			// each server's clock), which may differ by the time between
			// the two runs.
			zs, _ := cl.ZRangeWithScores(ctx, k, 0, -1).Result()
			ms := sorted(v)
			lapses := strings.HasSuffix(k, "\x1fx") || strings.HasSuffix(k, "\x1fg") || strings.HasSuffix(k, "\x1fr") // the waiters', those gone and the shared holders'
			if lapses {                                                                                               // near-equal lapse times may order either way
				slices.SortFunc(zs, func(a, b redis.Z) int { return strings.Compare(a.Member.(string), b.Member.(string)) })
				slices.Sort(ms)
			}
			want, got = fmt.Sprint(len(zs)), fmt.Sprint(len(ms))
			for j := range min(len(zs), len(ms)) {
				want += fmt.Sprint(" ", zs[j].Member)
				got += fmt.Sprint(" ", ms[j])
				if d := zs[j].Score - v.zset[ms[j]]; d > 1000 || d < -1000 || !lapses && d != 0 {
					t.Fatalf("after command %d (%s): %q scores %v on Redis, %v on the simulated node", i, describe(op), k, zs, v.zset)
				}
			}
		} else {
			want, _ = cl.Get(ctx, k).Result()
			got = v.str
		}
		pttl, _ := cl.PTTL(ctx, k).Result()
		mine := time.Duration(pttlOf(v, now)) * time.Millisecond
		if pttl < 0 {
			mine = time.Duration(pttlOf(v, now)) // -1 or -2, as go-redis reports them
		}
		if want != got || (pttl >= 0) != (mine >= 0) || (pttl-mine).Abs() > time.Second {
			t.Fatalf("after command %d (%s): key %q is %q (PTTL %v) on Redis, %q (PTTL %v) on the simulated node", i, describe(op), k, want, pttl, got, mine)
		}
	}
}
