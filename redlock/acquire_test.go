package redlock

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/drift"
	"github.com/quorumlock/quorumlock/pool"
)

// errorReplies are the server error replies a failing node gives, in turn.
var errorReplies = []string{
	"READONLY You can't write against a read only replica.",
	"OOM command not allowed when used memory > 'maxmemory'.",
	"NOPERM this user has no permissions to run the 'set' command",
	"WRONGTYPE Operation against a key holding the wrong kind of value",
}

// TestTryLockEverySubset tries every combination of nodes held by another
// token (32 subsets) and failing nodes (32 subsets, failing with an error
// reply or a network error): the lock is won exactly when a quorum of nodes
// is free and working, and after a failure no key of ours is left on any
// server while the other holder's keys are untouched.
func TestTryLockEverySubset(t *testing.T) {
	e := newEnv(t, 5)
	const foreign = "someone-else"
	for taken := range 32 {
		for failing := range 32 {
			key := fmt.Sprintf("subset-%d-%d", taken, failing)
			k := rkey(key)
			for i, n := range e.nodes {
				if taken&(1<<i) != 0 {
					n.m.Set(k, foreign)
					n.m.SetTTL(k, time.Minute)
				}
				if failing&(1<<i) != 0 {
					if (taken+failing+i)%2 == 0 {
						n.m.SetError(errorReplies[(taken+i)%len(errorReplies)])
					} else {
						n.fault.setErr(errConnRefused)
					}
				}
			}
			token := "tok-" + key
			c, err := New(e.pools, testNodeTimeout, withClock(time.Now), WithTokenGenerator(func() (string, error) { return token, nil }))
			if err != nil {
				t.Fatal(err)
			}
			l, err := c.TryLock(context.Background(), key)
			free := bits.OnesCount(uint(^(taken | failing) & 31))
			if want := free >= 3; (err == nil) != want {
				t.Fatalf("taken %05b failing %05b: TryLock err = %v, want success %v", taken, failing, err, want)
			}
			if err != nil {
				if !errors.Is(err, ErrNotAcquired) {
					t.Fatalf("taken %05b failing %05b: %v does not match ErrNotAcquired", taken, failing, err)
				}
				qe := quorumErr(t, err)
				for i, r := range qe.Nodes {
					if taken&(1<<i) != 0 && failing&(1<<i) == 0 && r.Outcome != OutcomeTaken && r.Outcome != OutcomePending {
						t.Fatalf("taken %05b failing %05b: node %d outcome %v, want taken or pending (%v)", taken, failing, i, r.Outcome, err)
					}
					if failing&(1<<i) != 0 && r.Outcome != OutcomeError && r.Outcome != OutcomePending {
						t.Fatalf("taken %05b failing %05b: node %d outcome %v, want error or pending (%v)", taken, failing, i, r.Outcome, err)
					}
				}
			} else if got := e.holders(k, token); got < 3 {
				t.Fatalf("taken %05b failing %05b: won but only %d nodes hold the token", taken, failing, got)
			}
			// Close waits for late replies to be handled and releases what is held.
			if err := c.Close(); err != nil {
				t.Fatalf("taken %05b failing %05b: Close: %v", taken, failing, err)
			}
			if l != nil {
				if err := l.Release(context.Background()); !errors.Is(err, ErrReleased) {
					t.Fatalf("Release after Close = %v, want ErrReleased", err)
				}
			}
			for i, n := range e.nodes {
				n.m.SetError("")
				n.fault.setErr(nil)
				got := e.value(i, k)
				if taken&(1<<i) != 0 {
					if got != foreign || n.m.TTL(k) != time.Minute {
						t.Fatalf("taken %05b failing %05b: node %d foreign key changed to %q ttl %v", taken, failing, i, got, n.m.TTL(k))
					}
				} else if got != "" {
					t.Fatalf("taken %05b failing %05b: node %d still holds %q after the attempt", taken, failing, i, got)
				}
			}
		}
	}
}

// TestWonRoundDoesNotWaitForSlowNode holds node 4's SET back until TryLock has
// returned: the round is decided on the other four. When the held-back SET
// lands after the lock was released, it is released too.
func TestWonRoundDoesNotWaitForSlowNode(t *testing.T) {
	e := newEnv(t, 5)
	c := e.client(WithNodeTimeout(time.Minute), WithTTL(time.Hour))
	e.nodes[4].fault.hold(false, "acquire")
	l, err := c.TryLock(context.Background(), "slow")
	if err != nil {
		t.Fatal(err)
	}
	if got := e.value(4, rkey("slow")); got != "" {
		t.Fatalf("node 4 already holds %q: the SET was not held back", got)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-e.nodes[4].fault.open() // the SET lands now, after the release
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	for i := range e.nodes {
		if got := e.value(i, rkey("slow")); got != "" {
			t.Fatalf("node %d holds %q after release and close", i, got)
		}
	}
}

// TestLateYesCountsForWonLock: a SET that lands after the round was won
// belongs to the lock; releasing the lock removes it too.
func TestLateYesCountsForWonLock(t *testing.T) {
	e := newEnv(t, 5)
	c := e.client(WithNodeTimeout(time.Minute), WithTTL(time.Hour))
	// Nodes 3 and 4 run the SET but hold their replies back, so the round is
	// decided on nodes 0 to 2 alone.
	e.nodes[3].fault.hold(true, "acquire")
	e.nodes[4].fault.hold(true, "acquire")
	l, err := c.TryLock(context.Background(), "late")
	if err != nil {
		t.Fatal(err)
	}
	<-e.nodes[3].fault.open()
	<-e.nodes[4].fault.open()
	if got := e.holders(rkey("late"), l.Token()); got != 5 {
		t.Fatalf("%d nodes hold the token, want 5", got)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil { // waits for the stragglers of Release
		t.Fatal(err)
	}
	if got := e.holders(rkey("late"), l.Token()); got != 0 {
		t.Fatalf("%d nodes hold the token after Release", got)
	}
}

// TestFailedRoundReleasesLateYes: the round fails on three "taken" answers
// while nodes 3 and 4 are held back; their SETs land afterwards and are
// released when their replies arrive.
func TestFailedRoundReleasesLateYes(t *testing.T) {
	for _, after := range []bool{false, true} {
		t.Run(fmt.Sprintf("reply-held=%v", after), func(t *testing.T) {
			e := newEnv(t, 5)
			c := e.client(WithNodeTimeout(time.Minute), WithTTL(time.Hour))
			k := rkey("contended")
			for i := range 3 {
				e.nodes[i].m.Set(k, "other")
			}
			e.nodes[3].fault.hold(after, "acquire")
			e.nodes[4].fault.hold(after, "acquire")
			_, err := c.TryLock(context.Background(), "contended")
			qe := quorumErr(t, err)
			want := []Outcome{OutcomeTaken, OutcomeTaken, OutcomeTaken, OutcomePending, OutcomePending}
			if fmt.Sprint(outcomes(qe)) != fmt.Sprint(want) {
				t.Fatalf("outcomes %v, want %v", outcomes(qe), want)
			}
			<-e.nodes[3].fault.open()
			<-e.nodes[4].fault.open()
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			for i := 3; i < 5; i++ {
				if got := e.value(i, k); got != "" {
					t.Fatalf("node %d still holds %q", i, got)
				}
			}
			for i := range 3 {
				if got := e.value(i, k); got != "other" {
					t.Fatalf("node %d: the other holder's key became %q", i, got)
				}
			}
		})
	}
}

// TestNodeTimeoutBoundsRound: three nodes never answer; the round ends at the
// per-node timeout with them named as timeouts, and the two nodes that said
// yes are rolled back before TryLock returns.
func TestNodeTimeoutBoundsRound(t *testing.T) {
	e := newEnv(t, 5)
	c := e.client(WithNodeTimeout(20 * time.Millisecond))
	// The first round also checks the nodes' identities and connects:
	// under -race on a busy machine that alone can take 20 ms.
	for i := 0; i < 20; i++ {
		if l, err := c.TryLock(context.Background(), "warm"); err == nil {
			_ = l.Release(context.Background())
			break
		}
	}
	for i := 2; i < 5; i++ {
		e.nodes[i].fault.hold(false, "acquire")
	}
	_, err := c.TryLock(context.Background(), "stuck")
	qe := quorumErr(t, err)
	want := []Outcome{OutcomeOK, OutcomeOK, OutcomeTimeout, OutcomeTimeout, OutcomeTimeout}
	if fmt.Sprint(outcomes(qe)) != fmt.Sprint(want) {
		t.Fatalf("outcomes %v, want %v", outcomes(qe), want)
	}
	if !strings.Contains(err.Error(), "2 of 5 nodes agreed, 3 needed (node2 timeout after") {
		t.Fatalf("message %q does not say what happened", err)
	}
	for i := range 2 {
		if got := e.value(i, rkey("stuck")); got != "" {
			t.Fatalf("node %d still holds %q when TryLock returned", i, got)
		}
	}
	for i := 2; i < 5; i++ {
		e.nodes[i].fault.open()
	}
}

// TestValidityUsesInjectedClock: the deadline is the round's start + TTL −
// drift allowance on the injected clock, and a round that used up the
// validity fails and leaves nothing behind.
func TestValidityUsesInjectedClock(t *testing.T) {
	e := newEnv(t, 5)
	clock := newManualClock()
	c := e.client(withClock(clock.Now), WithTTL(10*time.Second))

	start := clock.Now()
	clock.setStep(5 * time.Second) // each reading of the clock is 5 s after the last
	l, err := c.TryLock(context.Background(), "v")
	if err != nil {
		t.Fatal(err)
	}
	// The round starts at start and ends 5 s later: validity counts from its start.
	if want := start.Add(10*time.Second - drift.Allowance(10*time.Second, 0.01)); !l.Deadline().Equal(want) {
		t.Fatalf("deadline %v, want %v", l.Deadline(), want)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}

	clock.setStep(9900 * time.Millisecond) // 9.9 s + 102 ms allowance > 10 s TTL
	_, err = c.TryLock(context.Background(), "v")
	qe := quorumErr(t, err)
	if qe.Agreed() < 3 || qe.Validity > 0 || !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("got %v (agreed %d, validity %v), want all agreed and no validity", err, qe.Agreed(), qe.Validity)
	}
	if !strings.Contains(err.Error(), "leaving no validity") {
		t.Fatalf("message %q does not say the validity ran out", err)
	}
	if err := c.Close(); err != nil { // waits for replies that came after the decision
		t.Fatal(err)
	}
	for i := range e.nodes {
		if got := e.value(i, rkey("v")); got != "" {
			t.Fatalf("node %d holds %q after the failed round", i, got)
		}
	}
}

// TestErrorRepliesAreFailedVotes: error replies on two nodes still leave a
// quorum; on three they fail the acquisition, and the message carries them.
func TestErrorRepliesAreFailedVotes(t *testing.T) {
	e := newEnv(t, 5)
	c := e.client()
	for i := range 2 {
		e.nodes[i].m.SetError(errorReplies[i])
	}
	l, err := c.TryLock(context.Background(), "errs")
	if err != nil {
		t.Fatalf("two failing nodes of five: %v", err)
	}
	if err := l.Release(context.Background()); err == nil || !errors.Is(err, ErrNotHeld) {
		// two nodes still fail, but the other three confirm: quorum
		if err != nil {
			t.Fatalf("Release: %v", err)
		}
	}
	e.nodes[2].m.SetError(errorReplies[2])
	_, err = c.TryLock(context.Background(), "errs")
	qe := quorumErr(t, err)
	for i := range 3 {
		if qe.Nodes[i].Outcome != OutcomeError || !strings.Contains(err.Error(), errorReplies[i][:8]) {
			t.Fatalf("node %d: outcome %v; message %q should carry %q", i, qe.Nodes[i].Outcome, err, errorReplies[i][:8])
		}
	}
	for i := range 3 {
		e.nodes[i].m.SetError("")
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	for i := range e.nodes {
		if got := e.value(i, rkey("errs")); got != "" {
			t.Fatalf("node %d holds %q", i, got)
		}
	}
}

// TestWrongTypeOnExtendAndRelease: a key of another type under the lock's
// name (a WRONGTYPE reply from the scripts) is a failed vote and is never
// touched.
func TestWrongTypeOnExtendAndRelease(t *testing.T) {
	e := newEnv(t, 5)
	c := e.client()
	l, err := c.TryLock(context.Background(), "wt")
	if err != nil {
		t.Fatal(err)
	}
	k := rkey("wt")
	e.waitHolders(k, l.Token(), 5) // the stragglers of the won round have landed
	for i := range 3 {
		e.nodes[i].m.Del(k)
		if _, err := e.nodes[i].m.Lpush(k, "not-a-lock"); err != nil {
			t.Fatal(err)
		}
	}
	err = l.Extend(context.Background(), 0)
	qe := quorumErr(t, err)
	if qe.Nodes[0].Outcome != OutcomeError || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("Extend: %v, want WRONGTYPE error votes", err)
	}
	err = l.Release(context.Background())
	if !errors.Is(err, ErrNotHeld) || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("Release: %v, want ErrNotHeld with WRONGTYPE", err)
	}
	for i := range 3 {
		if got, _ := e.nodes[i].m.List(k); len(got) != 1 {
			t.Fatalf("node %d: the list was changed to %v", i, got)
		}
	}
}

func TestLockWaitsForRelease(t *testing.T) {
	e := newEnv(t, 5)
	c := e.client(WithRetryBackoff(time.Millisecond, 5*time.Millisecond))
	holder, err := c.TryLock(context.Background(), "wait")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	tried := e.nodes[0].fault.calls.Load()
	go func() {
		l, err := c.Lock(context.Background(), "wait")
		if err == nil {
			err = l.Release(context.Background())
		}
		got <- err
	}()
	for e.nodes[0].fault.calls.Load() < tried+3 { // the waiter has tried at least 3 times
		time.Sleep(time.Millisecond)
	}
	if err := holder.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter: %v", err)
	}
}

func TestLockStopsOnContext(t *testing.T) {
	e := newEnv(t, 5)
	c := e.client(WithRetryBackoff(time.Millisecond, 2*time.Millisecond))
	if _, err := c.TryLock(context.Background(), "busy"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	_, err := c.Lock(ctx, "busy")
	if !errors.Is(err, ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock after deadline: %v, want ErrNotAcquired and DeadlineExceeded", err)
	}
	var qe *QuorumError
	if !errors.As(err, &qe) {
		t.Fatalf("Lock error %v does not carry the last attempt", err)
	}

	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	_, err = c.Lock(ctx, "busy")
	if !errors.Is(err, ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Lock with cancelled ctx: %v, want ErrNotAcquired and Canceled", err)
	}
	_, err = c.TryLock(ctx, "free")
	if !errors.Is(err, ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("TryLock with cancelled ctx: %v, want ErrNotAcquired and Canceled", err)
	}
	if e.holders(rkey("free"), "") != 5 {
		t.Fatal("TryLock with a cancelled context wrote to a node")
	}
}

// TestCancelDuringRound: the caller's context ends while nodes are held
// back: the error matches the context's, and nothing is left behind.
func TestCancelDuringRound(t *testing.T) {
	e := newEnv(t, 5)
	c := e.client(WithNodeTimeout(time.Minute), WithTTL(time.Hour))
	for i := 2; i < 5; i++ {
		e.nodes[i].fault.hold(false, "acquire")
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for e.holders(rkey("cancel"), "") > 3 { // nodes 0 and 1 have answered
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	_, err := c.TryLock(ctx, "cancel")
	if !errors.Is(err, ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want ErrNotAcquired and Canceled", err)
	}
	for i := 2; i < 5; i++ {
		e.nodes[i].fault.open()
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	for i := range e.nodes {
		if got := e.value(i, rkey("cancel")); got != "" {
			t.Fatalf("node %d holds %q", i, got)
		}
	}
}

func TestMaxWait(t *testing.T) {
	e := newEnv(t, 5)
	c := e.client(WithRetryBackoff(time.Millisecond, 2*time.Millisecond))
	if _, err := c.TryLock(context.Background(), "mw"); err != nil {
		t.Fatal(err)
	}
	_, err := c.Lock(context.Background(), "mw", WithMaxWait(20*time.Millisecond))
	if !errors.Is(err, ErrNotAcquired) || !strings.Contains(err.Error(), "WithMaxWait") {
		t.Fatalf("got %v", err)
	}
	quorumErr(t, err)
}

// TestRollbackSkipsNodesThatHoldNothing: after a failed round, only nodes
// that may hold our token get a release; a node that answered "taken" or
// with an error reply costs no second round trip.
func TestRollbackSkipsNodesThatHoldNothing(t *testing.T) {
	e := newEnv(t, 5)
	c := e.client(WithNodeTimeout(time.Minute), WithTTL(time.Hour))
	k := rkey("skip")
	e.nodes[0].m.Set(k, "other")
	e.nodes[1].m.Set(k, "other")
	e.nodes[2].m.SetError(errorReplies[0])
	// Nodes 3 and 4 are free; hold node 4 back until 0..3 have answered, so
	// that the round is decided with node 3's "yes" in hand.
	e.nodes[4].fault.hold(false, "acquire")
	_, err := c.TryLock(context.Background(), "skip")
	quorumErr(t, err)
	<-e.nodes[4].fault.open()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	want := []int64{1, 1, 1, 2, 2} // acquire (+ release where our token may be)
	for i, n := range e.nodes {
		if got := n.fault.calls.Load(); got != want[i] {
			t.Errorf("node %d: %d calls, want %d", i, got, want[i])
		}
	}
	e.nodes[2].m.SetError("")
	if e.value(3, k) != "" || e.value(4, k) != "" || e.value(0, k) != "other" {
		t.Fatal("the roll-back left our key or touched the other holder's")
	}
}

func TestRetryDelayIsJittered(t *testing.T) {
	cfg := defaultConfig()
	seen := map[time.Duration]bool{}
	for range 100 {
		d := cfg.RetryDelay(3) // 25ms·2³ = 200ms: uniform in [100ms, 200ms]
		if d < 100*time.Millisecond || d > 200*time.Millisecond {
			t.Fatalf("delay %v outside [100ms, 200ms]", d)
		}
		seen[d] = true
	}
	if len(seen) < 50 {
		t.Fatalf("only %d distinct delays in 100: not jittered", len(seen))
	}
}

// TestErrUnavailable: a failed acquisition matches ErrUnavailable exactly
// when so many nodes failed that no quorum was possible: with no node
// taken, 3 of 5 failing (error replies, refused connections, or nodes not
// asked); never when every node answered, however many said "taken".
func TestErrUnavailable(t *testing.T) {
	e := newEnv(t, 5)
	c := e.client()
	ctx := context.Background()
	for failing := range 32 {
		key := fmt.Sprintf("unavail-%d", failing)
		for i, n := range e.nodes {
			if failing&(1<<i) != 0 {
				n.fault.setErr(errConnRefused)
			}
		}
		_, err := c.TryLock(ctx, key)
		for _, n := range e.nodes {
			n.fault.setErr(nil)
		}
		want := bits.OnesCount(uint(failing)) >= 3
		if (err != nil) != want || errors.Is(err, ErrUnavailable) != want {
			t.Fatalf("failing %05b: %v; want unavailable %v", failing, err, want)
		}
	}
	holder := e.client()
	if _, err := holder.TryLock(ctx, "taken"); err != nil {
		t.Fatal(err)
	}
	e.waitHolders(rkey("taken"), "", 0)
	_, err := c.TryLock(ctx, "taken")
	if !errors.Is(err, ErrNotAcquired) || errors.Is(err, ErrUnavailable) {
		t.Fatalf("a taken key: %v; want ErrNotAcquired and not ErrUnavailable", err)
	}
}

// TestUnavailableWhileRollingBack: a round the failed nodes decided is
// unavailable even when the caller's deadline passes afterwards, while the
// roll-back waits for a slow release of the node that said yes: the
// deadline did not cut the round short. The two failures come 20 ms after
// the yes; an attempt where they still overtook it is tried again.
func TestUnavailableWhileRollingBack(t *testing.T) {
	for attempt := range 5 {
		err, counted := unavailableWhileRollingBack(t, fmt.Sprintf("rolled%d", attempt))
		if !counted {
			continue // the yes was not counted before the failures decided
		}
		if !errors.Is(err, ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("2 of 3 nodes refused, the deadline passed during the roll-back: %v; want ErrUnavailable, not the deadline", err)
		}
		return
	}
	t.Fatal("in 5 attempts, the failures always overtook the yes")
}

// unavailableWhileRollingBack is one attempt: it returns TryLock's error and
// whether node 2's yes was counted in the round.
func unavailableWhileRollingBack(t *testing.T, key string) (error, bool) {
	e := newEnv(t, 3)
	yes := make(chan struct{})
	pools := []pool.Pool{
		failAfter{e.nodes[0].fault, yes}, failAfter{e.nodes[1].fault, yes},
		closeAfterAcquire{e.nodes[2].fault, yes},
	}
	c := New2(t, pools, WithNodeTimeout(5*time.Second))
	e.nodes[2].fault.hold(false, "release")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	go func() {
		<-ctx.Done()
		e.nodes[2].fault.open()
	}()
	_, err := c.TryLock(ctx, key)
	var qe *QuorumError
	if !errors.As(err, &qe) || qe.Nodes[2].Outcome != OutcomeOK {
		return err, false
	}
	if ctx.Err() == nil {
		t.Fatalf("TryLock returned before the caller's deadline, while the roll-back was held: %v", err)
	}
	return err, true
}

// failAfter is a Pool whose Acquire fails with a refused connection once
// after is closed.
type failAfter struct {
	pool.Pool
	after <-chan struct{}
}

func (f failAfter) Acquire(ctx context.Context, _, _ string, _ time.Duration) (bool, error) {
	select {
	case <-f.after:
		time.Sleep(20 * time.Millisecond) // the yes reaches the round first
		return false, errConnRefused
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// closeAfterAcquire is a Pool that closes done once its first Acquire
// returned.
type closeAfterAcquire struct {
	pool.Pool
	done chan struct{}
}

func (p closeAfterAcquire) Acquire(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	ok, err := p.Pool.Acquire(ctx, key, token, ttl)
	close(p.done)
	return ok, err
}

// TestDelayedWakeCutShort: a waiter woken to try after a delay (a split's
// late yes) tries at once when a release wakes it during that delay.
func TestDelayedWakeCutShort(t *testing.T) {
	c, err := New(asPools(newMemPools(5)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	n := c.notes
	s := newSleeper(c, c.cfg, single("k", "k"))
	defer s.stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.sleep(ctx, time.Hour)
	}()
	for n.Stats.WokenBySplit.Load() == 0 { // the waiter, asleep, is woken to try in an hour
		n.SplitLate("k", "", time.Hour)
		time.Sleep(time.Millisecond)
	}
	n.Released("k", "t") // a release of this Client's: at once
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("a release during the delay of a delayed wake-up did not cut it short")
	}
	if ctx.Err() != nil {
		t.Fatal("the sleep ended with its context, not with the release")
	}
}
