package redlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/drift"
	"github.com/quorumlock/quorumlock/pool"
)

// TestExtendFromItsOwnStart: a successful extend moves the deadline to its
// own start + TTL − allowance and sets the new TTL on every node.
func TestExtendFromItsOwnStart(t *testing.T) {
	e := newEnv(t, 5)
	clock := newManualClock()
	c := e.client(withClock(clock.Now))
	l, err := c.TryLock(context.Background(), "ext")
	if err != nil {
		t.Fatal(err)
	}
	// The won round's stragglers read the clock when they land: let them all
	// land first, so that the extend's first reading is the one after extendStart.
	e.waitHolders(rkey("ext"), l.Token(), 5)
	clock.Advance(3 * time.Second)
	extendStart := clock.Now()
	clock.setStep(time.Second) // the extend's round takes 1 s
	if err := l.Extend(context.Background(), 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if want := drift.Deadline(extendStart, 20*time.Second, drift.DefaultFactor); !l.Deadline().Equal(want) {
		t.Fatalf("deadline %v, want %v", l.Deadline(), want)
	}
	extended := 0 // the extend returns once a quorum confirmed
	for _, n := range e.nodes {
		if n.m.TTL(rkey("ext")) == 20*time.Second {
			extended++
		}
	}
	if extended < 3 {
		t.Fatalf("%d nodes have the new TTL, want a quorum", extended)
	}
}

// TestExtendAfterExpiry: once the keys expired on the servers, Extend fails
// with ErrLockLost and ErrNotHeld and creates nothing; once the local
// deadline passed, it fails without asking any node.
func TestExtendAfterExpiry(t *testing.T) {
	e := newEnv(t, 5)
	clock := newManualClock()
	c := e.client(withClock(clock.Now), WithTTL(time.Second), WithNodeTimeout(300*time.Millisecond))
	l, err := c.TryLock(context.Background(), "exp")
	if err != nil {
		t.Fatal(err)
	}
	e.waitHolders(rkey("exp"), l.Token(), 5) // the stragglers of the won round have landed
	for _, n := range e.nodes {
		n.m.FastForward(2 * time.Second) // the servers' keys expire; the local clock has not moved
	}
	err = l.Extend(context.Background(), 0)
	if !errors.Is(err, ErrLockLost) || !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Extend after expiry: %v, want ErrLockLost and ErrNotHeld", err)
	}
	for i := range e.nodes {
		if got := e.value(i, rkey("exp")); got != "" {
			t.Fatalf("Extend re-created the key on node %d", i)
		}
	}
	if err := l.Extend(context.Background(), 0); !errors.Is(err, ErrLockLost) {
		t.Fatalf("second Extend: %v, want ErrLockLost", err)
	}

	l2, err := c.TryLock(context.Background(), "exp2")
	if err != nil {
		t.Fatal(err)
	}
	e.waitHolders(rkey("exp2"), l2.Token(), 5) // no straggler of the won round is still to be counted
	clock.Advance(time.Second)                 // past the local deadline
	before := e.nodes[0].fault.calls.Load()
	if err := l2.Extend(context.Background(), 0); !errors.Is(err, ErrLockLost) {
		t.Fatalf("Extend after the deadline: %v, want ErrLockLost", err)
	}
	if e.nodes[0].fault.calls.Load() != before {
		t.Fatal("Extend after the deadline asked the nodes")
	}
	if ok, err := l2.Held(context.Background()); ok || err != nil {
		t.Fatalf("Held after the deadline = %v, %v", ok, err)
	}
}

// TestFailedExtendNeverMovesDeadlineLater: a minority confirms a longer TTL;
// the deadline stays where it was.
func TestFailedExtendNeverMovesDeadlineLater(t *testing.T) {
	e := newEnv(t, 5)
	c := e.client()
	l, err := c.TryLock(context.Background(), "partial")
	if err != nil {
		t.Fatal(err)
	}
	before := l.Deadline()
	for i := 2; i < 5; i++ {
		e.nodes[i].fault.setErr(errConnRefused)
	}
	err = l.Extend(context.Background(), time.Hour)
	if quorumErr(t, err); !errors.Is(err, ErrNotHeld) || errors.Is(err, ErrLockLost) {
		t.Fatalf("Extend: %v", err)
	}
	if !l.Deadline().Equal(before) {
		t.Fatalf("deadline moved from %v to %v", before, l.Deadline())
	}
	for i := 2; i < 5; i++ {
		e.nodes[i].fault.setErr(nil)
	}
	// A shorter TTL that fails moves the deadline earlier: nodes may have taken it.
	for i := 2; i < 5; i++ {
		e.nodes[i].fault.setErr(errConnRefused)
	}
	if err := l.Extend(context.Background(), 3*time.Second); err == nil {
		t.Fatal("Extend with 3 failing nodes succeeded")
	}
	if !l.Deadline().Before(before) {
		t.Fatalf("deadline %v not moved before %v after a failed shorter extend", l.Deadline(), before)
	}
}

// TestReleaseOutcomes: releasing twice is ErrReleased; releasing a lock
// another client now holds is ErrNotHeld, and the other's keys stay.
func TestReleaseOutcomes(t *testing.T) {
	e := newEnv(t, 5)
	c := e.client()
	l, err := c.TryLock(context.Background(), "rel")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(context.Background()); !errors.Is(err, ErrReleased) || errors.Is(err, ErrNotHeld) {
		t.Fatalf("second Release: %v, want ErrReleased only", err)
	}
	if err := l.Extend(context.Background(), 0); !errors.Is(err, ErrReleased) {
		t.Fatalf("Extend after Release: %v, want ErrReleased", err)
	}

	l, err = c.TryLock(context.Background(), "rel")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range e.nodes { // the lock expired and another client took it
		n.m.Set(rkey("rel"), "other")
	}
	err = l.Release(context.Background())
	if !errors.Is(err, ErrNotHeld) || errors.Is(err, ErrReleased) {
		t.Fatalf("Release of a lock someone else holds: %v, want ErrNotHeld", err)
	}
	if qe := quorumErr(t, err); strings.Count(fmt.Sprint(outcomes(qe)), "not held") < 3 {
		t.Fatalf("outcomes %v, want at least 3 not held", outcomes(qe))
	}
	for i := range e.nodes {
		if got := e.value(i, rkey("rel")); got != "other" {
			t.Fatalf("node %d: the other holder's key became %q", i, got)
		}
	}
}

// TestReleaseDetachesFromContext: a deferred Release with a cancelled
// context still deletes the keys.
func TestReleaseDetachesFromContext(t *testing.T) {
	e := newEnv(t, 5)
	c := e.client()
	ctx, cancel := context.WithCancel(context.Background())
	l, err := c.TryLock(ctx, "detach")
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if n := e.holders(rkey("detach"), l.Token()); n != 0 {
		t.Fatalf("%d nodes still hold the token", n)
	}
}

// TestScriptFlushBetweenAcquireAndRelease: losing the script cache is
// harmless.
func TestScriptFlushBetweenAcquireAndRelease(t *testing.T) {
	e := newEnv(t, 5)
	c := e.client()
	l, err := c.TryLock(context.Background(), "flush")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(context.Background(), 0); err != nil { // loads the script
		t.Fatal(err)
	}
	for _, n := range e.nodes {
		if err := n.rdb.ScriptFlush(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Extend(context.Background(), 0); err != nil {
		t.Fatalf("Extend after SCRIPT FLUSH: %v", err)
	}
	for _, n := range e.nodes {
		_ = n.rdb.ScriptFlush(context.Background()).Err()
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatalf("Release after SCRIPT FLUSH: %v", err)
	}
}

func TestHeldAndLocked(t *testing.T) {
	e := newEnv(t, 5)
	c := e.client()
	ctx := context.Background()
	if ok, err := c.Locked(ctx, "h"); ok || err != nil {
		t.Fatalf("Locked before = %v, %v", ok, err)
	}
	l, err := c.TryLock(ctx, "h")
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := l.Held(ctx); !ok || err != nil {
		t.Fatalf("Held = %v, %v", ok, err)
	}
	if ok, err := c.Locked(ctx, "h"); !ok || err != nil {
		t.Fatalf("Locked = %v, %v", ok, err)
	}
	// Three nodes fail: neither can tell.
	for i := range 3 {
		e.nodes[i].fault.setErr(errConnRefused)
	}
	if ok, err := l.Held(ctx); ok || !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Held with 3 failing nodes = %v, %v", ok, err)
	}
	if ok, err := c.Locked(ctx, "h"); ok || err == nil || !strings.Contains(err.Error(), "too few to tell") {
		t.Fatalf("Locked with 3 failing nodes = %v, %v", ok, err)
	}
	for i := range 3 {
		e.nodes[i].fault.setErr(nil)
	}
	// Three nodes now hold another token: not held, but locked by the other.
	for i := range 3 {
		e.nodes[i].m.Set(rkey("h"), "other")
	}
	if ok, err := l.Held(ctx); ok || err != nil {
		t.Fatalf("Held after takeover = %v, %v", ok, err)
	}
	if ok, err := c.Locked(ctx, "h"); !ok || err != nil {
		t.Fatalf("Locked after takeover = %v, %v", ok, err)
	}
	// Split between two tokens, none on a quorum: not locked.
	e.nodes[2].m.Del(rkey("h"))
	if ok, err := c.Locked(ctx, "h"); ok || err != nil {
		t.Fatalf("Locked with a 2/2 split = %v, %v", ok, err)
	}
	_ = l.Release(ctx)
	if ok, err := l.Held(ctx); ok || err != nil {
		t.Fatalf("Held after Release = %v, %v", ok, err)
	}
}

// TestLockConcurrentUse drives one Lock from many goroutines (run with
// -race): exactly one Release succeeds.
func TestLockConcurrentUse(t *testing.T) {
	e := newEnv(t, 5)
	c := e.client()
	l, err := c.TryLock(context.Background(), "conc")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 10 {
				_ = l.Extend(context.Background(), 0)
				_, _ = l.Held(context.Background())
				_, _ = l.Deadline(), l.Key()+l.Token()
			}
		})
	}
	wg.Wait()
	errs := make(chan error, 16)
	for range 16 {
		wg.Go(func() { errs <- l.Release(context.Background()) })
	}
	wg.Wait()
	close(errs)
	ok := 0
	for err := range errs {
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, ErrReleased):
			t.Fatalf("Release: %v", err)
		}
	}
	if ok != 1 {
		t.Fatalf("%d Releases succeeded, want 1", ok)
	}
}

// TestMutualExclusion: 16 goroutines contend for one key; a counter guarded
// by the lock loses no update and no two holders overlap.
func TestMutualExclusion(t *testing.T) {
	e := newEnv(t, 5)
	// Generous timeouts: this test is about exclusion, not speed, and 16
	// goroutines under -race on 2 cores can stall a node for a while.
	c := e.client(WithRetryBackoff(100*time.Microsecond, time.Millisecond), WithNodeTimeout(time.Second), WithTTL(time.Minute))
	var (
		inside  int32
		counter int
		wg      sync.WaitGroup
		mu      sync.Mutex // only to read inside race-free
		overlap bool
	)
	for range 16 {
		wg.Go(func() {
			for range 5 {
				l, err := c.Lock(context.Background(), "mutex")
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				inside++
				if inside > 1 {
					overlap = true
				}
				mu.Unlock()
				v := counter
				counter = v + 1 // a lost update shows up under -race and in the count
				mu.Lock()
				inside--
				mu.Unlock()
				if err := l.Release(context.Background()); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if overlap || counter != 80 {
		t.Fatalf("overlap %v, counter %d, want false and 80", overlap, counter)
	}
}

func TestBadInput(t *testing.T) {
	e := newEnv(t, 5)
	c := e.client()
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"empty key", errOf(c.TryLock(ctx, "")), "key is empty"},
		{"empty key Lock", errOf(c.Lock(ctx, "")), "key is empty"},
		{"empty key Locked", errOf2(c.Locked(ctx, "")), "key is empty"},
		{"TTL below allowance+timeout", errOf(c.TryLock(ctx, "k", WithTTL(50*time.Millisecond))), "leaves no validity"},
		{"TTL zero", errOf(c.TryLock(ctx, "k", WithTTL(0))), "at least 1ms"},
		{"TTL over MaxTTL", errOf(c.TryLock(ctx, "k", WithTTL(MaxTTL+time.Millisecond))), "at most MaxTTL"},
		{"drift factor", errOf(c.TryLock(ctx, "k", WithDriftFactor(0.7))), "WithDriftFactor(0.7)"},
		{"node timeout", errOf(c.TryLock(ctx, "k", WithNodeTimeout(0))), "must be positive"},
		{"backoff", errOf(c.Lock(ctx, "k", WithRetryBackoff(time.Second, time.Millisecond))), "max at least base"},
		{"max wait", errOf(c.Lock(ctx, "k", WithMaxWait(-1))), "must not be negative"},
		{"token generator", errOf(c.TryLock(ctx, "k", WithTokenGenerator(nil))), "WithTokenGenerator(nil)"},
		{"quorum too small", errOf(c.TryLock(ctx, "k", WithQuorum(2))), "more than half"},
		{"quorum too large", errOf(c.TryLock(ctx, "k", WithQuorum(6))), "at most all"},
		{"nil option", errOf(c.TryLock(ctx, "k", nil)), "option is nil"},
		{"nil logger", errOf(c.TryLock(ctx, "k", WithLogger(nil))), "WithLogger(nil)"},
		{"empty token", errOf(c.TryLock(ctx, "k", WithTokenGenerator(func() (string, error) { return "", nil }))), "empty token"},
		{"token error", errOf(c.TryLock(ctx, "k", WithTokenGenerator(func() (string, error) { return "", errors.New("no entropy") }))), "no entropy"},
		{"extend TTL", l(t, c).Extend(ctx, -time.Second), "at least 1ms"},
		{"extend TTL too small", l(t, c).Extend(ctx, 10*time.Millisecond), "leaves no validity"},
		{"no pools", errOfNew(New(nil)), "no pools"},
		{"nil pool", errOfNew(New([]pool.Pool{e.pools[0], nil})), "pool 1 is nil"},
		{"same name", errOfNew(New([]pool.Pool{e.pools[0], e.pools[1], e.pools[0]})), "pools 0 and 2 are the same Pool"},
		{"New quorum", errOfNew(New(e.pools[:3], WithQuorum(4))), "does not fit 3 pools"},
		{"New TTL", errOfNew(New(e.pools, WithTTL(time.Millisecond))), "leaves no validity"},
	} {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, tc.err, tc.want)
			continue
		}
		if errors.Is(tc.err, ErrNotAcquired) {
			t.Errorf("%s: %v matches ErrNotAcquired; bad input must not look like contention", tc.name, tc.err)
		}
	}
	for i, n := range e.nodes {
		for _, k := range n.m.Keys() { // only the locks taken by l() for the extend cases
			if !strings.HasPrefix(k, DefaultKeyPrefix+"{bad-input-") {
				t.Errorf("node %d holds %q: bad input reached Redis", i, k)
			}
		}
	}
}

var lockSeq int

// l takes a fresh lock for a test case.
func l(t *testing.T, c *Client) *Lock {
	lockSeq++
	lk, err := c.TryLock(context.Background(), fmt.Sprint("bad-input-", lockSeq))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lk.Release(context.Background()) })
	return lk
}

func errOf(_ *Lock, err error) error      { return err }
func errOf2(_ bool, err error) error      { return err }
func errOfNew(_ *Client, err error) error { return err }

// TestNewDuplicatePools: the same Pool twice, or two Pools of one address,
// are one server counted twice, and the error does not suggest renaming
// them; two different Pools given one name may be two masters, and the
// error says how to name them apart.
func TestNewDuplicatePools(t *testing.T) {
	e := newEnv(t, 3)
	byAddr := func(i int) pool.Pool {
		p, err := pool.New(e.nodes[i].rdb)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	renamed, err := pool.New(e.nodes[2].rdb, pool.WithName("node0"))
	if err != nil {
		t.Fatal(err)
	}
	same := byAddr(1)
	for _, tc := range []struct {
		name  string
		pools []pool.Pool
		want  string
		hint  bool
	}{
		{"same Pool", []pool.Pool{same, byAddr(0), same}, "pools 0 and 2 are the same Pool", false},
		{"same address", []pool.Pool{byAddr(1), byAddr(0), byAddr(1)}, "pools 0 and 2 both reach " + e.nodes[1].m.Addr(), false},
		{"same name", []pool.Pool{e.pools[0], e.pools[1], renamed}, `pools 0 and 2 are both named "node0"`, true},
	} {
		_, err := New(tc.pools)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: New = %v, want an error containing %q", tc.name, err, tc.want)
			continue
		}
		if hint := strings.Contains(err.Error(), "WithName"); hint != tc.hint {
			t.Errorf("%s: suggests WithName: %v, want %v: %v", tc.name, hint, tc.hint, err)
		}
	}
}

// TestDuplicateServer: two pools with different names that reach the same
// server (same run_id) are caught at first use; every operation fails.
func TestDuplicateServer(t *testing.T) {
	e := newEnv(t, 5)
	id := "run-id-of-node-0"
	e.nodes[0].fault.runID = &id
	e.nodes[3].fault.runID = &id
	c := e.client()
	_, err := c.TryLock(context.Background(), "dup")
	if err == nil || !strings.Contains(err.Error(), `"node0" and "node3" reach the same Redis server`) || errors.Is(err, ErrNotAcquired) {
		t.Fatalf("TryLock with a duplicated server: %v", err)
	}
	if _, err := c.Locked(context.Background(), "dup"); err == nil {
		t.Fatal("Locked with a duplicated server succeeded")
	}
	for i, n := range e.nodes {
		if keys := n.m.Keys(); len(keys) != 0 {
			t.Fatalf("node %d holds %v", i, keys)
		}
	}
}

// TestUnverifiedNodeIsNotAsked: a node whose identity could not be checked
// does not count until a later check succeeds.
func TestUnverifiedNodeIsNotAsked(t *testing.T) {
	e := newEnv(t, 5)
	e.nodes[4].fault.mu.Lock()
	e.nodes[4].fault.runIDErr = errConnRefused
	e.nodes[4].fault.mu.Unlock()
	c := e.client(withRecheck(0))
	l, err := c.TryLock(context.Background(), "unverified")
	if err != nil {
		t.Fatal(err)
	}
	if got := e.value(4, rkey("unverified")); got != "" {
		t.Fatal("the unverified node was asked")
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.waitGone(rkey("unverified")) // Release returns at quorum; the rest follow
	for i := 2; i < 4; i++ {
		e.nodes[i].fault.setErr(errConnRefused)
	}
	_, err = c.TryLock(context.Background(), "unverified")
	if qe := quorumErr(t, err); qe.Nodes[4].Outcome != OutcomeNotAsked || !strings.Contains(err.Error(), "node4 not asked: dial tcp: connection refused (its identity, INFO server run_id, is not verified yet)") {
		t.Fatalf("TryLock: %v", err)
	}
	e.waitGone(rkey("unverified")) // nodes that answered after the decision are rolled back
	// The node answers again: a background check verifies it, and it counts.
	e.nodes[4].fault.mu.Lock()
	e.nodes[4].fault.runIDErr = nil
	e.nodes[4].fault.mu.Unlock()
	for !c.ids.Verified(4) {
		_, _ = c.Locked(context.Background(), "poke") // each call may start a check
		time.Sleep(time.Millisecond)
	}
	if _, err := c.TryLock(context.Background(), "unverified"); err != nil {
		t.Fatalf("with node 4 verified, 3 of 5 work: %v", err)
	}
}

// TestClose: Close releases held locks, and everything after it is ErrClosed.
func TestClose(t *testing.T) {
	e := newEnv(t, 5)
	c, err := New(e.pools, testNodeTimeout)
	if err != nil {
		t.Fatal(err)
	}
	l, err := c.TryLock(context.Background(), "closing")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if n := e.holders(rkey("closing"), l.Token()); n != 0 {
		t.Fatalf("%d nodes still hold the lock after Close", n)
	}
	if err := l.Release(context.Background()); !errors.Is(err, ErrReleased) {
		t.Fatalf("Release after Close: %v", err)
	}
	if _, err := c.TryLock(context.Background(), "x"); !errors.Is(err, ErrClosed) {
		t.Fatalf("TryLock after Close: %v", err)
	}
	if _, err := c.Locked(context.Background(), "x"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Locked after Close: %v", err)
	}
	if err := c.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Close: %v", err)
	}
	// The pools (and the caller's clients) stay open.
	if err := e.nodes[0].rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
}

func TestQuorumErrorMessage(t *testing.T) {
	qe := &QuorumError{Op: "acquire", Key: "orders:42", Quorum: 3, Nodes: []NodeResult{
		{Node: "10.0.0.1:6379", Outcome: OutcomeOK},
		{Node: "10.0.0.2:6379", Outcome: OutcomeOK},
		{Node: "10.0.0.3:6379", Outcome: OutcomeTaken},
		{Node: "10.0.0.4:6379", Outcome: OutcomeTimeout, Latency: 50 * time.Millisecond, Err: context.DeadlineExceeded},
		{Node: "10.0.0.5:6379", Outcome: OutcomeError, Err: errors.New("READONLY You can't write against a read only replica.")},
	}}
	want := `redlock: acquire "orders:42": 2 of 5 nodes agreed, 3 needed (10.0.0.3:6379 taken; 10.0.0.4:6379 timeout after 50ms; 10.0.0.5:6379 error: READONLY You can't write against a read only replica.)`
	if qe.Error() != want {
		t.Fatalf("got  %s\nwant %s", qe.Error(), want)
	}
	if !errors.Is(qe, ErrNotAcquired) || errors.Is(qe, context.DeadlineExceeded) || errors.Is(qe, ErrNotHeld) {
		t.Fatal("acquire QuorumError must match ErrNotAcquired only")
	}
	qe.Op = "release"
	if !errors.Is(qe, ErrNotHeld) || errors.Is(qe, ErrNotAcquired) {
		t.Fatal("release QuorumError must match ErrNotHeld only")
	}
	if Outcome(99).String() != "Outcome(99)" {
		t.Fatal(Outcome(99).String())
	}
}

// TestCloseDuringWinningRound: a round that wins after Close took its list of
// locks is rolled back and reports ErrClosed; nothing is left behind.
func TestCloseDuringWinningRound(t *testing.T) {
	e := newEnv(t, 5)
	c, err := New(e.pools, WithNodeTimeout(time.Minute), WithTTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Locked(context.Background(), "warm-up"); err != nil { // identity check done
		t.Fatal(err)
	}
	for i := range 3 {
		e.nodes[i].fault.hold(false, "acquire")
	}
	got := make(chan error, 1)
	go func() {
		_, err := c.TryLock(context.Background(), "closing")
		got <- err
	}()
	for e.nodes[0].fault.calls.Load() == 0 { // the round is under way
		time.Sleep(time.Millisecond)
	}
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	for {
		c.mu.RLock()
		done := c.closed
		c.mu.RUnlock()
		if done {
			break
		}
		time.Sleep(time.Millisecond)
	}
	for i := range 3 {
		e.nodes[i].fault.open()
	}
	if err := <-got; !errors.Is(err, ErrClosed) {
		t.Fatalf("TryLock that won during Close: %v, want ErrClosed", err)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	for i := range e.nodes {
		if v := e.value(i, rkey("closing")); v != "" {
			t.Fatalf("node %d holds %q after Close", i, v)
		}
	}
}

// TestAnswersWithTwoNodesDown: with 2 of 5 nodes down, the three healthy
// nodes settle Locked, Held and Extend; they are read to the end.
func TestAnswersWithTwoNodesDown(t *testing.T) {
	e := newEnv(t, 5)
	c := e.client()
	ctx := context.Background()
	l, err := c.TryLock(ctx, "down")
	if err != nil {
		t.Fatal(err)
	}
	e.waitHolders(rkey("down"), l.Token(), 5)
	for i := 3; i < 5; i++ {
		e.nodes[i].fault.setErr(errConnRefused)
	}
	for range 20 { // the failing nodes answer first most of the time
		if ok, err := c.Locked(ctx, "free"); ok || err != nil {
			t.Fatalf("Locked on a free key = %v, %v; want false, nil", ok, err)
		}
	}
	for i := range 3 {
		e.nodes[i].m.Set(rkey("down"), "other")
	}
	if ok, err := l.Held(ctx); ok || err != nil {
		t.Fatalf("Held with another token on the 3 healthy nodes = %v, %v; want false, nil", ok, err)
	}
	if err := l.Extend(ctx, 0); !errors.Is(err, ErrLockLost) {
		t.Fatalf("Extend = %v, want ErrLockLost", err)
	}
}

// TestCloseReportsFailedReleases: Close says when it could not release a
// lock because nodes failed, but not when the lock had expired.
func TestCloseReportsFailedReleases(t *testing.T) {
	e := newEnv(t, 5)
	c, err := New(e.pools, testNodeTimeout)
	if err != nil {
		t.Fatal(err)
	}
	expired, err := c.TryLock(context.Background(), "expired")
	if err != nil {
		t.Fatal(err)
	}
	e.waitHolders(rkey("expired"), expired.Token(), 5)
	for _, n := range e.nodes {
		n.m.Del(rkey("expired"))
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close with an expired lock = %v, want nil", err)
	}

	c, err = New(e.pools, testNodeTimeout)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryLock(context.Background(), "unreleasable"); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		e.nodes[i].fault.setErr(errConnRefused)
	}
	if err := c.Close(); !errors.Is(err, ErrNotHeld) || !strings.Contains(err.Error(), `release "unreleasable"`) {
		t.Fatalf("Close with 3 failing nodes = %v, want the failed release", err)
	}
}

func TestRetryDelayBounds(t *testing.T) {
	for _, tc := range []struct{ base, max time.Duration }{
		{DefaultRetryBase, DefaultRetryMax},
		{20 * time.Second, time.Hour},
		{time.Nanosecond, 1 << 62},
		{time.Hour, time.Hour},
	} {
		cfg := defaultConfig()
		cfg.RetryBase, cfg.RetryMax = tc.base, tc.max
		prev := time.Duration(0)
		for attempt := range 200 {
			d := cfg.RetryDelay(attempt)
			if d < 0 || d > tc.max || (attempt > 0 && d < prev/4) {
				t.Fatalf("base %v max %v attempt %d: delay %v (previous %v)", tc.base, tc.max, attempt, d, prev)
			}
			prev = d
		}
	}
}
