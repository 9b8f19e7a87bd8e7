package redlock

import (
	"context"
	"errors"
	"testing"
	"time"
)

type obsKey struct{}

// TestObserverSeesFailuresAndDegradedWins: a refused TryLock is reported as
// AcquireFailed with every node's outcome; one with too few nodes as
// unavailable; a win without every node as degraded; each with the
// caller's context.
func TestObserverSeesFailuresAndDegradedWins(t *testing.T) {
	e := newEnv(t, 5)
	rec := &recorder{}
	c := e.client(WithObserver(rec))
	ctx := context.WithValue(context.Background(), obsKey{}, "caller")

	l, err := c.TryLock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	won := rec.of("acquired")
	if len(won) != 1 || won[0].ev.Degraded() || won[0].ev.Agreed() < 3 || len(won[0].ev.Nodes) != 5 || won[0].ev.Quorum != 3 || won[0].ev.Attempts != 1 {
		t.Fatalf("acquired events %+v, want one not degraded, with a quorum of 5 nodes, quorum 3, 1 attempt", won)
	}
	if won[0].ev.Context.Value(obsKey{}) != "caller" {
		t.Fatal("Acquired's Context lacks the caller's values")
	}
	if _, err := c.TryLock(ctx, "k"); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("TryLock of a held key: %v", err)
	}
	failed := rec.of("acquire-failed")
	if len(failed) != 1 || failed[0].ev.Unavailable() || len(failed[0].ev.Nodes) != 5 || failed[0].ev.Token != "" {
		t.Fatalf("acquire-failed events %+v, want one, taken (not unavailable), with 5 nodes and no token", failed)
	}
	taken := 0
	for _, n := range failed[0].ev.Nodes {
		if n.Outcome == OutcomeTaken {
			taken++
		}
	}
	if taken < 3 { // it is decided once 3 of 5 said taken
		t.Fatalf("a refused round with %d nodes taken: %+v", taken, failed[0].ev.Nodes)
	}
	if failed[0].ev.Degraded() != (taken > 0) {
		t.Fatalf("Degraded() = %v with %d nodes taken", failed[0].ev.Degraded(), taken)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if rel := rec.of("released"); len(rel) != 1 || rel[0].ev.Agreed() < 3 || rel[0].ev.Context.Value(obsKey{}) != "caller" {
		t.Fatalf("released events %+v, want one with 5 nodes and the caller's context", rel)
	}

	e.nodes[4].fault.setErr(errors.New("node down"))
	l, err = c.TryLock(ctx, "k2")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if won := rec.of("acquired"); len(won) != 2 || won[1].ev.Nodes[4].Outcome == OutcomeError != won[1].ev.Degraded() {
		t.Fatalf("acquired events %+v, want the second degraded exactly when node 4's failure came before the decision", won)
	}

	e.nodes[3].fault.setErr(errors.New("node down"))
	e.nodes[2].fault.setErr(errors.New("node down"))
	if _, err := c.TryLock(ctx, "k3"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("TryLock with 3 of 5 nodes down: %v, want ErrUnavailable", err)
	}
	if failed := rec.of("acquire-failed"); len(failed) != 2 || !failed[1].ev.Unavailable() {
		t.Fatalf("acquire-failed events %+v, want the second unavailable", failed)
	}
}

// TestObserverSeesContention: a Lock that waits reports each refused
// attempt as Contended, then Acquired with its attempts and the whole wait;
// one whose ctx ends reports one AcquireFailed.
func TestObserverSeesContention(t *testing.T) {
	e := newEnv(t, 3)
	rec := &recorder{}
	c := e.client(WithObserver(rec), WithRetryBackoff(5*time.Millisecond, 20*time.Millisecond))
	ctx := context.Background()
	holder, err := c.TryLock(ctx, "busy")
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
	defer cancel()
	if _, err := c.Lock(short, "busy"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock until ctx ends: %v", err)
	}
	contended := len(rec.of("contended"))
	failed := rec.of("acquire-failed")
	if contended < 1 || len(failed) != 1 || failed[0].ev.Attempts < contended {
		t.Fatalf("%d contended, acquire-failed %+v: want at least one contended, then one failure counting every attempt", contended, failed)
	}
	go func() {
		time.Sleep(100 * time.Millisecond)
		_ = holder.Release(ctx)
	}()
	l, err := c.Lock(ctx, "busy")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	won := rec.of("acquired")
	last := won[len(won)-1].ev
	// The holder is released 100 ms after the Lock call began (less the
	// time to start the call): it cannot win sooner.
	if last.Attempts < 2 || last.Waited < last.Took || last.Waited < 50*time.Millisecond {
		t.Fatalf("acquired after waiting: %d attempts, waited %v, took %v: want several attempts and the wait", last.Attempts, last.Waited, last.Took)
	}
	calls := map[uint64]int{}     // per call number, its events
	for _, r := range rec.all() { // the holder's Release may still be reporting
		if r.kind == "contended" || r.kind == "acquired" || r.kind == "acquire-failed" {
			calls[r.ev.Call]++
		}
	}
	if len(calls) != 3 || calls[0] != 0 || calls[won[0].ev.Call] != 1 || calls[failed[0].ev.Call] != contended+1 {
		t.Fatalf("events per call number %v: want 3 calls (the holder's, the one that gave up, the one that waited), each event of a call under its number", calls)
	}
}

// TestWaitWithTooFewNodesIsUnavailable: a Lock (or Do) that waits until its
// ctx ends with too few nodes up says so (ErrUnavailable), as the README's
// example relies on, and the observer's last event tells the same.
func TestWaitWithTooFewNodesIsUnavailable(t *testing.T) {
	e := newEnv(t, 5)
	rec := &recorder{}
	c := e.client(WithObserver(rec))
	for i := range 3 {
		e.nodes[i].fault.setErr(errors.New("connection refused"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err := c.Do(ctx, "k", func(context.Context) error { return nil })
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Do with 3 of 5 nodes down: %v; want ErrUnavailable, ErrNotAcquired and the deadline", err)
	}
	failed := rec.of("acquire-failed")
	if len(failed) != 1 || !failed[0].ev.Unavailable() {
		t.Fatalf("acquire-failed events %+v, want one, unavailable", failed)
	}
}

// TestObserverReportsEachRoundOnce: a Lock whose ctx ends while it waits
// reports its refused rounds as Contended and then AcquireFailed without a
// round (its last round was reported already); one whose ctx ended before
// any round reports no attempt (found by the adversarial review).
func TestObserverReportsEachRoundOnce(t *testing.T) {
	e := newEnv(t, 3)
	rec := &recorder{}
	c := e.client(WithObserver(rec), WithRetryBackoff(150*time.Millisecond, 150*time.Millisecond))
	held, err := c.TryLock(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	if _, err := c.Lock(ctx, "k"); err == nil {
		t.Fatal("Lock of a held key succeeded")
	}
	cont, fail := rec.of("contended"), rec.of("acquire-failed")
	rounds := len(cont)
	if len(fail) == 1 && fail[0].ev.Nodes != nil {
		rounds++
	}
	if len(fail) != 1 || rounds != fail[0].ev.Attempts {
		t.Fatalf("%d contended and %+v: want each of the call's rounds reported by exactly one event with Nodes", len(cont), fail)
	}
	gone, cancel2 := context.WithCancel(context.Background())
	cancel2()
	_, _ = c.TryLock(gone, "k2")
	if fail := rec.of("acquire-failed"); len(fail) != 2 || fail[1].ev.Attempts != 0 || fail[1].ev.Nodes != nil {
		t.Fatalf("a TryLock whose ctx had ended: %+v, want no attempt and no round", fail[len(fail)-1])
	}
}
