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

	"github.com/quorumlock/quorumlock/drift"
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

// TestHistoryChecker shows, without Redis, that the kit's checker reports
// what the scenarios rely on it to report: two holders of one key inside
// one window (S1), deadlines outside their bounds (S2), fences that do not
// increase or are 0 (S4), a counter that lost an increment (S5), and two
// critical sections that overlap because one ran past its lock's deadline
// (SEC).
func TestHistoryChecker(t *testing.T) {
	const ttl = time.Second
	allow := drift.Allowance(ttl, drift.DefaultFactor)
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	// hold records holder who of key k with fence f: its acquire call ran
	// from start to ret (ms), its deadline is TTL − allowance after start
	// plus skew, its critical section incremented the counter from read
	// over [ret, rel], and its release started at rel (none if rel < 0).
	type hold struct {
		who        string
		f          uint64
		start, ret int
		rel        int
		skew       time.Duration
		read       int64
	}
	build := func(holds []hold, counter int64) *history.History {
		h := history.New()
		for _, x := range holds {
			h.Add(history.Op{Client: x.who, Key: "k", Kind: history.Acquire, Outcome: history.OK, Token: x.who, Fence: x.f, TTL: ttl,
				Start: ms(x.start), End: ms(x.ret), Deadline: ms(x.start) + ttl - allow + x.skew})
			end := ms(x.rel)
			if x.rel < 0 {
				end = ttl + ms(100) // past the deadline
			} else {
				h.Add(history.Op{Client: x.who, Key: "k", Kind: history.Release, Outcome: history.OK, Token: x.who, Fence: x.f, Start: end, End: end + ms(1)})
			}
			h.AddSection(history.Section{Client: x.who, Key: "k", Token: x.who, Fence: x.f, Start: ms(x.ret), End: end, Counted: true, Read: x.read, Wrote: true})
		}
		h.SetCounter("k", counter)
		return h
	}
	for _, tc := range []struct {
		name    string
		holds   []hold
		counter int64
		want    map[history.Property]int
	}{
		{"sequential holders", []hold{{"a", 3, 0, 1, 10, 0, 0}, {"b", 5, 5, 11, 20, 0, 1}, {"c", 6, 21, 22, 30, 0, 2}}, 3,
			map[history.Property]int{}},
		{"two holders inside a's window", []hold{{"a", 3, 0, 1, 100, 0, 0}, {"b", 5, 0, 2, 3, 0, 1}, {"c", 6, 0, 50, 60, 0, 2}}, 3,
			map[history.Property]int{history.S1: 2, history.SEC: 2}},
		{"no drift allowance deducted", []hold{{"a", 3, 0, 1, 10, allow, 0}}, 1,
			map[history.Property]int{history.S2: 1}},
		{"deadline below start + TTL − allowance", []hold{{"a", 3, 0, 1, 10, -ms(5), 0}}, 1,
			map[history.Property]int{history.S2: 1}},
		{"duplicate fence", []hold{{"a", 3, 0, 1, 10, 0, 0}, {"b", 3, 2, 11, 20, 0, 1}}, 2,
			map[history.Property]int{history.S4: 1}},
		{"falling fence", []hold{{"a", 3, 0, 1, 10, 0, 0}, {"b", 9, 0, 20, 30, 0, 1}, {"c", 4, 15, 40, 50, 0, 2}}, 3,
			map[history.Property]int{history.S4: 1}},
		{"fence 0", []hold{{"a", 0, 0, 1, 10, 0, 0}}, 1,
			map[history.Property]int{history.S4: 1}},
		{"lost increment", []hold{{"a", 3, 0, 1, 10, 0, 0}, {"b", 5, 5, 11, 20, 0, 1}}, 1,
			map[history.Property]int{history.S5: 1}},
		{"section past the deadline, overlapped", []hold{{"a", 3, 0, 1, -1, 0, 0}, {"b", 5, 990, 1000, 1200, 0, 1}}, 2,
			map[history.Property]int{history.SEC: 1}},
	} {
		r := history.Check(build(tc.holds, tc.counter), history.Config{Nodes: nodes, Fencing: true})
		for _, p := range []history.Property{history.S1, history.S2, history.S4, history.S5, history.SEC} {
			if r.Count(p) != tc.want[p] {
				t.Errorf("%s: %d %s violations, want %d:\n%s", tc.name, r.Count(p), p, tc.want[p], r)
			}
		}
	}
}
