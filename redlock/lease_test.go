package redlock

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/quorumlock/quorumlock/internal/testlog"
)

// leaseEnv is a Client over 5 in-memory pools, for tests in a synctest
// bubble: every timer, renewal and expiry runs on virtual time.
func leaseEnv(t *testing.T, opts ...Option) ([]*memPool, *Client, *recorder) {
	t.Helper()
	ps := newMemPools(5)
	rec := &recorder{}
	c, err := New(asPools(ps), append([]Option{WithObserver(rec), WithTTL(3 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return ps, c, rec
}

// TestRenewalCadence: an auto-extended lock is first renewed at a random
// point in the second half of its renewal interval (TTL/3), so that locks
// acquired together do not come due together, then every TTL/3; it stays
// held far past its TTL, and Release stops the renewals.
func TestRenewalCadence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ps, c, rec := leaseEnv(t)
		l, err := c.TryLock(t.Context(), "cadence", WithAutoExtend(true))
		if err != nil {
			t.Fatal(err)
		}
		acquired := time.Now()
		time.Sleep(10*time.Second + 500*time.Millisecond) // 3.5 TTLs
		ext := rec.of("extended")
		if len(ext) < 10 || len(ext) > 11 {
			t.Fatalf("%d renewals in 10.5s, want 10 or 11 (every 1s after the first)", len(ext))
		}
		if first := ext[0].at.Sub(acquired); first < 500*time.Millisecond || first > time.Second {
			t.Fatalf("first renewal at %v, want within [0.5s, 1s]", first)
		}
		for i, e := range ext[1:] {
			if want := ext[i].at.Add(time.Second); !e.at.Equal(want) {
				t.Fatalf("renewal %d at %v, want 1s after the one before (%v)", i+1, e.at.Sub(acquired), want.Sub(acquired))
			}
		}
		n := len(ext)
		if l.Err() != nil || holders(ps, rkey("cadence"), l.Token()) != 5 {
			t.Fatalf("after 3.5 TTLs: Err %v, %d holders", l.Err(), holders(ps, rkey("cadence"), l.Token()))
		}
		if err := l.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Second)
		if m := len(rec.of("extended")); m != n {
			t.Fatalf("%d renewals after Release, want none", m-n)
		}
		if got := l.Err(); !errors.Is(got, ErrReleased) {
			t.Fatalf("Err after Release = %v", got)
		}
	})
}

// TestRenewalsNeverOverlap: renewals that take longer than their interval
// still run one at a time, also against concurrent manual extends.
func TestRenewalsNeverOverlap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ps, c, _ := leaseEnv(t, WithTTL(10*time.Second), WithNodeTimeout(time.Second), WithRenewEvery(100*time.Millisecond))
		for _, p := range ps {
			p.setDelay(300 * time.Millisecond)
		}
		l, err := c.TryLock(t.Context(), "overlap", WithAutoExtend(true))
		if err != nil {
			t.Fatal(err)
		}
		for range 5 {
			go func() { _ = l.Extend(context.Background(), 0) }()
		}
		time.Sleep(5 * time.Second)
		_ = l.Release(t.Context())
		for _, p := range ps {
			if p.extends.Load() < 5 || p.maxExtend.Load() != 1 {
				t.Fatalf("%s: %d extends, at most %d at once; want >= 5 and 1", p.name, p.extends.Load(), p.maxExtend.Load())
			}
		}
	})
}

// TestLossAfterFailedRenewals: with every node failing, renewals fail and
// the lock is declared lost no later than its deadline: Done closes, Err and
// the Context's cause are ErrLockLost, the observer hears of it.
func TestLossAfterFailedRenewals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ps, c, rec := leaseEnv(t)
		l, err := c.TryLock(t.Context(), "lost", WithAutoExtend(true))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := l.Context(t.Context())
		defer cancel()
		for _, p := range ps {
			p.setErr(errConnRefused)
		}
		deadline := l.Deadline()
		<-l.Done()
		if now := time.Now(); now.After(deadline) {
			t.Fatalf("lost %v after the deadline", now.Sub(deadline))
		}
		if !errors.Is(l.Err(), ErrLockLost) {
			t.Fatalf("Err = %v", l.Err())
		}
		<-ctx.Done()
		if !errors.Is(context.Cause(ctx), ErrLockLost) {
			t.Fatalf("context cause %v", context.Cause(ctx))
		}
		// The Observer hears of the loss on the goroutine that declared
		// it, after Done closed (no order between them is promised).
		synctest.Wait()
		if len(rec.of("extend-failed")) == 0 || len(rec.of("lost")) != 1 {
			t.Fatalf("observer: %d failed renewals, %d losses", len(rec.of("extend-failed")), len(rec.of("lost")))
		}
		// Never resurrected: the nodes come back, nothing renews.
		for _, p := range ps {
			p.setErr(nil)
		}
		before := ps[0].extends.Load()
		time.Sleep(10 * time.Second)
		if ps[0].extends.Load() != before || l.Err() == nil {
			t.Fatal("a lost lock was extended again")
		}
	})
}

// TestLeaseTimerWithoutRenewal: without auto-extension, Done closes at the
// deadline on the local clock, even with every node unreachable; an extend
// moves it.
func TestLeaseTimerWithoutRenewal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ps, c, _ := leaseEnv(t)
		l, err := c.TryLock(t.Context(), "timer")
		if err != nil {
			t.Fatal(err)
		}
		done := l.Done()
		time.Sleep(time.Second)
		if err := l.Extend(t.Context(), 0); err != nil {
			t.Fatal(err)
		}
		deadline := l.Deadline()
		for _, p := range ps {
			p.setErr(errConnRefused) // the network is gone
		}
		select {
		case <-done:
			t.Fatal("Done closed before the deadline")
		case <-time.After(time.Until(deadline) - time.Millisecond):
		}
		<-done
		if !time.Now().Equal(deadline) {
			t.Fatalf("Done closed at %v, deadline %v", time.Now(), deadline)
		}
		if !errors.Is(l.Err(), ErrLockLost) {
			t.Fatalf("Err = %v", l.Err())
		}
	})
}

func TestLeaseOnRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, c, rec := leaseEnv(t)
		l, err := c.TryLock(t.Context(), "rel")
		if err != nil {
			t.Fatal(err)
		}
		if l.Err() != nil {
			t.Fatalf("Err while held = %v", l.Err())
		}
		ctx, cancel := l.Context(t.Context())
		defer cancel()
		if err := l.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		<-l.Done()
		<-ctx.Done()
		if !errors.Is(l.Err(), ErrReleased) || !errors.Is(context.Cause(ctx), ErrReleased) {
			t.Fatalf("Err %v, cause %v", l.Err(), context.Cause(ctx))
		}
		// A Context taken after the release is done at once.
		ctx2, cancel2 := l.Context(t.Context())
		defer cancel2()
		<-ctx2.Done()
		if len(rec.of("acquired")) != 1 || len(rec.of("released")) != 1 || len(rec.of("lost")) != 0 {
			t.Fatalf("events %+v", rec.events)
		}
	})
}

// TestMaxHold: renewal stops once it would carry the lock past the maximum
// hold time; the lock then expires at its deadline.
func TestMaxHold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, c, _ := leaseEnv(t)
		start := time.Now()
		l, err := c.TryLock(t.Context(), "runaway", WithAutoExtend(true), WithMaxHold(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		<-l.Done()
		held := time.Since(start)
		if held > 10*time.Second || held < 7*time.Second || !errors.Is(l.Err(), ErrLockLost) {
			t.Fatalf("held %v, Err %v; want lost within the 10s bound, renewed until close to it", held, l.Err())
		}
	})
}

// TestAutoExtendStopsOnClose: Close releases the lock and joins its
// auto-extender (the synctest bubble fails if a goroutine is left).
func TestAutoExtendStopsOnClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ps, c, _ := leaseEnv(t)
		l, err := c.TryLock(t.Context(), "close", WithAutoExtend(true))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if !errors.Is(l.Err(), ErrReleased) || holders(ps, rkey("close"), l.Token()) != 0 {
			t.Fatalf("after Close: Err %v, %d holders", l.Err(), holders(ps, rkey("close"), l.Token()))
		}
	})
}

func TestDo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ps, c, _ := leaseEnv(t)
		ctx := t.Context()

		// fn's error comes back; the lock is released; renewals ran meanwhile.
		errWork := errors.New("work failed")
		var token string
		err := c.Do(ctx, "do", func(ctx context.Context) error {
			time.Sleep(5 * time.Second) // longer than the TTL: auto-extended
			if ctx.Err() != nil {
				t.Errorf("lease context ended while held: %v", context.Cause(ctx))
			}
			token = "seen"
			return errWork
		})
		if !errors.Is(err, errWork) || errors.Is(err, ErrLockLost) || token != "seen" {
			t.Fatalf("Do = %v", err)
		}
		if ok, _ := c.Locked(ctx, "do"); ok {
			t.Fatal("Do left the lock held")
		}

		// A panic is re-raised after the release.
		func() {
			defer func() {
				if p := recover(); p != "boom" {
					t.Fatalf("recovered %v, want boom", p)
				}
				if ok, _ := c.Locked(ctx, "do"); ok {
					t.Fatal("the lock is held after a panic in fn")
				}
			}()
			_ = c.Do(ctx, "do", func(context.Context) error { panic("boom") })
		}()

		// The lock is lost while fn runs: fn's context ends with ErrLockLost,
		// and Do's error says so.
		err = c.Do(ctx, "do", func(ctx context.Context) error {
			for _, p := range ps {
				p.setErr(errConnRefused)
			}
			<-ctx.Done()
			if !errors.Is(context.Cause(ctx), ErrLockLost) {
				t.Errorf("cause %v", context.Cause(ctx))
			}
			return ctx.Err()
		})
		if !errors.Is(err, ErrLockLost) || !errors.Is(err, context.Canceled) {
			t.Fatalf("Do with a lost lock = %v", err)
		}
		for _, p := range ps {
			p.setErr(nil)
		}
		time.Sleep(3 * time.Second) // the lost lock's keys expire

		// Waiting for the lock ends with the caller's context.
		holder, err := c.TryLock(ctx, "do")
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		called := false
		err = c.Do(wctx, "do", func(context.Context) error { called = true; return nil })
		if called || !errors.Is(err, ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Do while held elsewhere = %v (fn called %v)", err, called)
		}
		_ = holder.Release(ctx)

		if err := c.Do(ctx, "do", nil); err == nil || !strings.Contains(err.Error(), "fn is nil") {
			t.Fatalf("Do(nil) = %v", err)
		}
	})
}

// TestConcurrentExtendsKeepDeadlineSafe: extends with different TTLs from
// several goroutines never leave the deadline later than the keys live on a
// quorum of nodes.
func TestConcurrentExtendsKeepDeadlineSafe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ps, c, _ := leaseEnv(t, WithTTL(10*time.Second), WithNodeTimeout(time.Second))
		for i, p := range ps {
			p.setDelay(time.Duration(i) * 10 * time.Millisecond) // stragglers
		}
		l, err := c.TryLock(t.Context(), "ext")
		if err != nil {
			t.Fatal(err)
		}
		for round := range 20 {
			done := make(chan struct{})
			for _, ttl := range []time.Duration{2 * time.Second, 6 * time.Second, 3 * time.Second} {
				go func() {
					defer func() { done <- struct{}{} }()
					_ = l.Extend(t.Context(), ttl)
				}()
			}
			for range 3 {
				<-done
			}
			synctest.Wait()
			alive := 0
			for _, p := range ps {
				p.mu.Lock()
				if e, ok := p.get(rkey("ext")); ok && !e.exp.Before(l.Deadline()) {
					alive++
				}
				p.mu.Unlock()
			}
			if alive < 3 {
				t.Fatalf("round %d: the deadline %v outlives the keys on all but %d nodes", round, l.Deadline(), alive)
			}
			time.Sleep(500 * time.Millisecond)
		}
	})
}

// TestLossIsSticky: a lock lost and then released still reports
// ErrLockLost, its contexts are cancelled at the moment of the loss, and Held
// proving the token gone marks it lost.
func TestLossIsSticky(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ps, c, _ := leaseEnv(t)
		l, err := c.TryLock(t.Context(), "sticky")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := l.Context(t.Context())
		defer cancel()
		for _, p := range ps { // the keys vanish (another client took over)
			p.mu.Lock()
			p.keys[rkey("sticky")] = memEntry{val: "other", exp: time.Now().Add(time.Hour)}
			p.mu.Unlock()
		}
		if ok, err := l.Held(t.Context()); ok || err != nil {
			t.Fatalf("Held = %v, %v", ok, err)
		}
		if !errors.Is(l.Err(), ErrLockLost) || ctx.Err() == nil {
			t.Fatalf("after Held saw the token gone: Err %v, ctx %v", l.Err(), ctx.Err())
		}
		_ = l.Release(t.Context())
		if !errors.Is(l.Err(), ErrLockLost) || !errors.Is(context.Cause(ctx), ErrLockLost) {
			t.Fatalf("after Release: Err %v, cause %v; want ErrLockLost to stay", l.Err(), context.Cause(ctx))
		}
	})
}

// TestExtendWaitsWithContext: an Extend queued behind a slow one gives up
// when its context ends.
func TestExtendWaitsWithContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ps, c, _ := leaseEnv(t, WithTTL(10*time.Second), WithNodeTimeout(2*time.Second))
		l, err := c.TryLock(t.Context(), "queue")
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ps {
			p.setDelay(time.Second)
		}
		go func() { _ = l.Extend(context.Background(), 0) }()
		synctest.Wait() // the first Extend holds the slot
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
		defer cancel()
		start := time.Now()
		if err := l.Extend(ctx, 0); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) != 10*time.Millisecond {
			t.Fatalf("queued Extend = %v after %v", err, time.Since(start))
		}
	})
}

func TestRenewEveryMustFit(t *testing.T) {
	ps := newMemPools(5)
	_, err := New(asPools(ps), WithTTL(3*time.Second), WithNodeTimeout(500*time.Millisecond), WithRenewEvery(2400*time.Millisecond))
	if err == nil || !strings.Contains(err.Error(), "WithRenewEvery") {
		t.Fatalf("New = %v, want the renewal interval refused", err)
	}
}

// TestLossNamesFailingNodes: when three of five nodes die under an
// auto-extended lock, the first failed renewal logs each failing node at
// once (not only once the lock is lost), and the loss reason Err gives
// names them.
func TestLossNamesFailingNodes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf testlog.Buffer
		ps, c, _ := leaseEnv(t, WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
		l, err := c.TryLock(t.Context(), "named", WithAutoExtend(true))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ps[2:] {
			p.setErr(errConnRefused)
		}
		<-l.Done()
		synctest.Wait() // Done closes before the loss is logged
		err = l.Err()
		if !errors.Is(err, ErrLockLost) {
			t.Fatalf("Err = %v, want ErrLockLost", err)
		}
		t.Logf("Err: %v", err)
		for _, p := range ps[2:] {
			if !strings.Contains(err.Error(), p.name+" error") {
				t.Errorf("the loss reason does not name %s: %v", p.name, err)
			}
		}
		out := buf.String()
		lost := strings.Index(out, "lock lost")
		if lost < 0 {
			t.Fatalf("the loss was not logged:\n%s", out)
		}
		for _, p := range ps[2:] {
			if i := strings.Index(out, p.name+" unreachable since"); i < 0 || i > lost {
				t.Errorf("%s's failed renewals were not logged before the loss:\n%s", p.name, out)
			}
		}
	})
}
