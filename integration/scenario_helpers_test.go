package integration

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/redlock"
	"github.com/quorumlock/quorumlock/testkit/history"
)

// The scenarios record what their holders did in a History of the test kit
// (testkit/history) and leave the judging to its checker: S1 (no two
// holders' windows overlap), S2 (deadline bounds), S4 (fences increase),
// S5 (a guarded counter loses no increment), LIN and SEC (no two holders'
// critical sections overlap).

// recorded is a lockClient whose lock calls, and the critical sections run
// under its locks, are recorded in a History. Several goroutines may share
// one; each goroutine of a scenario usually has its own, named after it.
type recorded struct {
	h    *history.History
	rec  *history.Recorder
	lc   *lockClient
	name string
	ttl  time.Duration
}

// record returns lc's calls recorded in h under the name who, for locks of
// TTL ttl, which every acquire asks for (the checker bounds each deadline
// by the recorded TTL).
func record(h *history.History, lc *lockClient, who string, ttl time.Duration) *recorded {
	return &recorded{h: h, rec: h.Recorder(who, lc.Client, history.WithTTL(ttl)), lc: lc, name: who, ttl: ttl}
}

// acquire is Recorder.Acquire with redlock.WithTTL(r's TTL) and opts
// (which must not set another TTL): TryLock with wait 0, Lock with
// wait < 0, Lock with redlock.WithMaxWait(wait) otherwise. The token of
// the lock it returns counts as won for lc's check of failed tokens
// (closeAndCheck).
func (r *recorded) acquire(ctx context.Context, key string, wait time.Duration, opts ...redlock.Option) (*redlock.Lock, history.Op, error) {
	l, op, err := r.rec.Acquire(ctx, key, wait, append([]redlock.Option{redlock.WithTTL(r.ttl)}, opts...)...)
	r.lc.won(l, err)
	return l, op, err
}

// extend is Recorder.Extend with the lock's own TTL.
func (r *recorded) extend(ctx context.Context, l *redlock.Lock) error {
	_, err := r.rec.Extend(ctx, l, 0)
	return err
}

// release is Recorder.Release. It first fails the test if l's deadline has
// passed: the holder worked on under a lock it no longer held (the test
// process stalled longer than the TTL), which the checker only reports
// when another holder's critical section overlapped (SEC).
func (r *recorded) release(t *testing.T, ctx context.Context, l *redlock.Lock) error {
	if late := time.Since(l.Deadline()); late > 0 {
		t.Errorf("%s by %s (token %s): the critical section ran %v past the lock's deadline (the machine stalled longer than the TTL?)",
			l.Key(), r.name, l.Token(), late)
	}
	_, err := r.rec.Release(ctx, l)
	return err
}

// increment is the critical section of the contention scenarios, run under
// l: it reads ctr, the counter the lock guards, pauses, and writes back the
// value read plus one, in separate atomic steps. Two holders inside at once
// lose an increment, while the race detector (blind to the ordering Redis
// gives two Clients) stays quiet. It is recorded as a Section that read and
// wrote the counter: S5 compares the counter (History.SetCounter) with the
// number of such sections, and SEC finds two that overlap.
func (r *recorded) increment(l *redlock.Lock, ctr *atomic.Int64, pause time.Duration) {
	sec := history.Section{Client: r.name, Key: l.Key(), Token: l.Token(), Fence: l.Fence(), Start: r.h.Now(), Counted: true}
	sec.Read = ctr.Load()
	time.Sleep(pause)
	ctr.Store(sec.Read + 1)
	sec.Wrote = true
	sec.End = r.h.Now()
	r.h.AddSection(sec)
}

// lockWorker is one goroutine of a contention scenario, on a recorded client of
// its own name.
type lockWorker struct {
	*recorded
	rng  *rand.Rand
	wait time.Duration // as in recorded.acquire
}

// newWorker returns worker w of lc, named who, whose random choices come
// from seed w, s.
func newWorker(h *history.History, lc *lockClient, who string, ttl time.Duration, w int, s uint64, wait time.Duration) *lockWorker {
	return &lockWorker{recorded: record(h, lc, who, ttl), rng: rand.New(rand.NewPCG(uint64(w), s)), wait: wait}
}

// workerTally counts what the workers of a contention scenario did. All its
// methods are safe for concurrent use.
type workerTally struct {
	failed, relFailed, unexpected atomic.Int64
	mu                            sync.Mutex
	ops                           []history.Op // the acquisitions that ran a critical section
}

// done returns how many critical sections the workers completed.
func (tl *workerTally) done() int {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return len(tl.ops)
}

// acquired returns the records of the acquisitions that ran a critical
// section, in the order they were tallied.
func (tl *workerTally) acquired() []history.Op {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return slices.Clone(tl.ops)
}

// unexpect fails the test, printing the first 5 of the workers' unexpected
// errors.
func (tl *workerTally) unexpect(t *testing.T, format string, args ...any) {
	if tl.unexpected.Add(1) <= 5 {
		t.Errorf(format, args...)
	}
}

// turn runs one cycle on key, with pause inside the critical section, and
// tallies it: a failed acquisition (unexpected unless it failed with
// ErrNotAcquired or as ctx ended), a critical section done, a failed
// Release (unexpected unless relOK says a fault explains it). It reports
// whether a critical section ran.
func (w *lockWorker) turn(t *testing.T, ctx context.Context, key string, ctr *atomic.Int64, pause time.Duration, tl *workerTally, relOK func(error) bool) bool {
	l, op, err := w.acquire(ctx, key, w.wait)
	if err != nil {
		if ctx.Err() == nil {
			tl.failed.Add(1)
			if !errors.Is(err, redlock.ErrNotAcquired) {
				tl.unexpect(t, "%s: acquire %s: unexpected error %v", w.name, key, err)
			}
		}
		return false
	}
	w.increment(l, ctr, pause)
	rerr := w.release(t, context.Background(), l)
	tl.mu.Lock()
	tl.ops = append(tl.ops, op)
	tl.mu.Unlock()
	if rerr != nil {
		tl.relFailed.Add(1)
		if !relOK(rerr) {
			tl.unexpect(t, "%s: release %s: %v", w.name, key, rerr)
		}
	}
	return true
}

// checkHistory runs the kit's checker over h (cfg.Nodes defaults to the
// cluster's size), fails the test on every violation it reports, logs its
// summary and returns the Report for the scenario's own counts.
func checkHistory(t *testing.T, h *history.History, cfg history.Config) *history.Report {
	t.Helper()
	if cfg.Nodes == 0 {
		cfg.Nodes = nodes
	}
	r := history.Check(h, cfg)
	if r.Total() > 0 {
		t.Errorf("the history checker found %d violations:\n%s", r.Total(), r)
	} else {
		t.Logf("history checked:\n%s", r)
	}
	return r
}
