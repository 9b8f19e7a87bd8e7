package redlock

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"testing"
	"time"
)

// The counterexample of docs/safety.md, "Semaphores": N = 5 nodes, k = 2
// permits, and three clients whose commands reach the nodes A = {0,1,2},
// B = {0,1,3} and C = {2,3,4} (the others time out for them). Each node
// sees at most two of them.
var naiveReach = [][]int{{0, 1, 2}, {0, 1, 3}, {2, 3, 4}}

// naiveAdmit is the naive design's per-node script: admit the holder while
// fewer than ARGV[2] holders are admitted here.
const naiveAdmit = `
if redis.call('SCARD', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('SADD', KEYS[1], ARGV[1])
  return 1
end
return 0`

// TestNaiveSemaphoreAdmitsTooMany runs the naive design on real scripts:
// every node admits at most k holders and a holder counts once a majority
// admitted it. The schedule above gives three holders of two permits.
func TestNaiveSemaphoreAdmitsTooMany(t *testing.T) {
	e := newEnv(t, 5)
	holders := 0
	for c, reach := range naiveReach {
		admitted := 0
		for _, i := range reach {
			n, err := e.nodes[i].rdb.Eval(context.Background(), naiveAdmit, []string{"naive"}, fmt.Sprintf("client-%d", c), 2).Int()
			if err != nil {
				t.Fatal(err)
			}
			admitted += n
		}
		if admitted >= 3 {
			holders++
		}
	}
	if holders != 3 {
		t.Fatalf("the naive design admitted %d holders of 2 permits under the counterexample; the argument says 3", holders)
	}
}

// TestSemaphoreUnderNaiveCounterexample runs the same schedule against
// Semaphore: permit i is a lock of its own, taken with a majority, and two
// majorities share a node, so the third client finds each permit held on
// one of its three nodes and is refused.
func TestSemaphoreUnderNaiveCounterexample(t *testing.T) {
	e := newEnv(t, 5)
	c := e.scriptClient(WithTTL(time.Minute))
	verifyAll(t, c)
	s, err := c.Semaphore("counter", 2)
	if err != nil {
		t.Fatal(err)
	}
	var held []int
	for who, reach := range naiveReach {
		out := map[int]bool{0: true, 1: true, 2: true, 3: true, 4: true}
		for _, i := range reach {
			delete(out, i)
		}
		for i := range out {
			e.nodes[i].m.SetError("ERR unreachable for this client")
		}
		l, err := s.TryAcquire(context.Background())
		for i := range out {
			e.nodes[i].m.SetError("")
		}
		switch {
		case err == nil:
			held = append(held, l.Permit())
		case !errors.Is(err, ErrNotAcquired):
			t.Fatalf("client %d: %v", who, err)
		}
	}
	if len(held) != 2 || held[0] == held[1] {
		t.Fatalf("permits held under the counterexample: %v, want the two permits once each", held)
	}
}

// TestCountingQuorumBound checks the arithmetic of docs/safety.md by
// exhaustive search: with N nodes admitting k holders each and a holder
// counted once q nodes admitted it, the most holders at once is
// floor(N·k/q), so the design is safe exactly when q > N·k/(k+1).
func TestCountingQuorumBound(t *testing.T) {
	for n := 3; n <= 6; n++ {
		for k := 1; k <= 4; k++ {
			for q := n/2 + 1; q <= n; q++ {
				most := mostHolders(n, k, q)
				if most != n*k/q {
					t.Fatalf("N=%d k=%d q=%d: search finds %d holders, floor(N·k/q) = %d", n, k, q, most, n*k/q)
				}
				if safe := q*(k+1) > n*k; safe != (most <= k) {
					t.Fatalf("N=%d k=%d q=%d: %d holders at most, yet q > N·k/(k+1) is %v", n, k, q, most, safe)
				}
			}
		}
	}
}

// mostHolders is the most holders n nodes of capacity k can admit on q
// nodes each, by depth-first search over the holders' node sets (in
// non-decreasing order, which loses no solution).
func mostHolders(n, k, q int) int {
	var sets []uint
	for s := uint(0); s < 1<<n; s++ {
		if bits.OnesCount(s) == q {
			sets = append(sets, s)
		}
	}
	load := make([]int, n)
	var dfs func(from int) int
	dfs = func(from int) int {
		best := 0
		for j := from; j < len(sets); j++ {
			ok := true
			for i := range n {
				if sets[j]&(1<<i) != 0 && load[i] == k {
					ok = false
				}
			}
			if !ok {
				continue
			}
			for i := range n {
				if sets[j]&(1<<i) != 0 {
					load[i]++
				}
			}
			best = max(best, 1+dfs(j))
			for i := range n {
				if sets[j]&(1<<i) != 0 {
					load[i]--
				}
			}
		}
		return best
	}
	return dfs(0)
}
