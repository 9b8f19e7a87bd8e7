package integration

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/redlock"
	hist "github.com/quorumlock/quorumlock/testkit/history"
)

// The chaos runs' workloads of lines and shared holders (docs/design.md,
// "Hand-off", "Shared holders", "Resume and Inspect"), beside the 16
// workers and under the same faults, recorded in the same history and
// checked by the same checker, and judged for WF, LB, ERR and RES
// (chaos_props_test.go):
//
//   - Crowds of short waiters. Two line clients run chaosLineWaiters
//     goroutines each; each sleeps 1–3 s, then makes one Lock call that
//     gives up after 20–250 ms (WithMaxWait, or a context that ends), 9 in
//     10 on chaosLineKey, else on one of chaosKeys, and runs a section and
//     releases if it won. Every 8–12 s a stampede wakes 4 in 5 of them at
//     once, for calls of 200–600 ms, so that the line holds about a
//     hundred waiters. Meanwhile one holder takes chaosLineKey (Lock, up to
//     20 s) and keeps it for 60–100 s (a section now and then, an Extend
//     every 0.5–0.7 s, tried again after 0.1–0.2 s while the lock lasts
//     when one fails), releases it and takes it again: every waiter's call
//     joins the line and leaves it while the key stays held, which is what
//     made the lines grow without bound (before the fix, 20–50 entries a
//     second, so a 2-minute run passes chaosLineMax).
//   - Waiters of other kinds on the same keys: a LockAll (200–1000 ms) of
//     chaosLineKey and one of chaosKeys, chaos-d or chaosFloodKey, or of
//     one of chaosKeys and chaos-d or chaosFloodKey, and permits of a
//     semaphore named like the key (chaosLineKey, 2 permits: its keys share
//     the lock key's hash tag and the Client's turns), taken with Acquire
//     or TryAcquire.
//   - A flood of readers with waiting writers. Two flood clients run
//     chaosFloodReaders readers each, which take chaosFloodKey as shared
//     holders (TryLock, or Lock for 100–500 ms) and hold it 0.1–1.5 s with
//     a section at the start and at the end (and an Extend 1 in 3), so that
//     the key is almost always shared, and one writer each, which every
//     0.5–2.5 s waits for the key alone (Lock for 2–4 s) and runs a section
//     under it. WF judges what the nodes answered the readers while a
//     writer waited in their line.
//   - Resumes of raw values. Every 0.2–0.4 s a prober reads one lock key
//     on one node with a plain GET (chaosFloodKey half the time, else
//     chaosLineKey or one of chaosKeys) and, when the value is one the
//     nodes keep as a mark (0x1c a shared key's, 0x1e a handed key's, a
//     value with 0x1f a session lock's), gives it to Client.Resume, not
//     auto-extended. RES: such a Resume must fail.
//
// The line and flood clients are faulted like the workers (the faulter
// draws from every client). Their many goroutines share one Recorder per
// client (shareRecorder), so their failed rounds' tokens are not judged by
// L2. All of it runs only while the run runs: the calls are short, so the
// 15 s form of `make test` stays as long as it was.
const (
	chaosLineKey        = "chaos-line"
	chaosFloodKey       = "chaos-flood"
	chaosLineClients    = 2
	chaosFloodClients   = 2
	chaosLineWaiters    = 60 // per line client
	chaosFloodReaders   = 5  // per flood client
	chaosLineSemPermits = 2
)

// chaosLineGuardedKeys are the keys whose counters the workloads' sections
// guard, which the sweeps read too.
func chaosLineGuardedKeys() []string {
	keys := []string{chaosLineKey, chaosFloodKey}
	for i := range chaosLineSemPermits {
		keys = append(keys, hist.PermitKey(chaosLineKey, i))
	}
	return keys
}

// chaosLines runs the workloads and keeps what they did.
type chaosLines struct {
	r      *chaosRun
	lines  []*chaosClient // the line clients
	floods []*chaosClient // the flood clients
	sems   map[*chaosClient]*redlock.Semaphore
	wf     *wfJudge
	lb     *lbSampler
	raw    chaosRawResumes

	mu       sync.Mutex
	stampede chan struct{}  // closed to wake the waiters at once
	holdEnds map[string]int // why the long holder's holds ended

	waits, waitsWon       atomic.Int64 // the waiters' Lock calls, and those that won
	stampeded             atomic.Int64
	holds, holdExtends    atomic.Int64 // the long holder's acquisitions and extends
	several, severalWon   atomic.Int64
	permits, permitsWon   atomic.Int64
	writerWon, readersWon atomic.Int64
}

// newChaosLines makes the workloads' clients (made like the workers', the flood
// clients' Pools recording their commands for WF).
func (r *chaosRun) newChaosLines() (*chaosLines, error) {
	lr := &chaosLines{r: r, sems: map[*chaosClient]*redlock.Semaphore{}, wf: newWFJudge(r.h, chaosFloodKey), lb: newLBSampler(r.admins), stampede: make(chan struct{}), holdEnds: map[string]int{}}
	lr.raw.tried, lr.raw.refused, lr.raw.notHeld, lr.raw.skipped = map[string]int{}, map[string]int{}, map[string]int{}, map[string]int{}
	for k := range chaosLineClients {
		cc, err := r.newClient(fmt.Sprintf("ln%d", k), nil)
		if err != nil {
			return nil, err
		}
		sem, err := cc.Client.Semaphore(chaosLineKey, chaosLineSemPermits, redlock.WithFencing(false), redlock.WithMaxWait(600*time.Millisecond))
		if err != nil {
			return nil, fmt.Errorf("%s: semaphore %s: %w", cc.name, chaosLineKey, err)
		}
		lr.sems[cc] = sem
		lr.lines = append(lr.lines, cc)
	}
	for k := range chaosFloodClients {
		cc, err := r.newClient(fmt.Sprintf("fl%d", k), lr.wf.wrap)
		if err != nil {
			return nil, err
		}
		lr.floods = append(lr.floods, cc)
	}
	for _, cc := range lr.clients() {
		cc.shareRecorder(chaosTTL)
	}
	return lr, nil
}

// clients returns the workloads' clients.
func (lr *chaosLines) clients() []*chaosClient {
	return append(append([]*chaosClient{}, lr.lines...), lr.floods...)
}

// start runs every workload on wg until ctx ends.
func (lr *chaosLines) start(ctx context.Context, wg *sync.WaitGroup) {
	seed := uint64(time.Now().UnixNano())
	n := uint64(0)
	rng := func() *rand.Rand { n++; return rand.New(rand.NewPCG(seed, n)) }
	// Each goroutine gets a generator of its own, made here.
	run := func(fn func(context.Context, *chaosClient, *rand.Rand), cc *chaosClient) {
		g := rng()
		wg.Go(func() { fn(ctx, cc, g) })
	}
	for _, cc := range lr.lines {
		for range chaosLineWaiters {
			run(lr.waiter, cc)
		}
		run(lr.permitWaiter, cc)
	}
	run(lr.holder, lr.lines[0])
	run(lr.lockAll, lr.lines[len(lr.lines)-1])
	g := rng()
	wg.Go(func() { lr.stampedes(ctx, g) })
	for _, cc := range lr.floods {
		for range chaosFloodReaders {
			run(lr.reader, cc)
		}
		run(lr.writer, cc)
	}
	run(lr.prober, lr.floods[0])
	wg.Go(func() { lr.lb.run(ctx, lr.r.h) })
}

// chaosSleep sleeps d or until ctx ends; it reports whether ctx is still live.
func chaosSleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func chaosMs(rng *rand.Rand, lo, hi int) time.Duration {
	return time.Duration(lo+rng.IntN(hi-lo)) * time.Millisecond
}

// stampedes wakes the waiters at once every 8–12 s.
func (lr *chaosLines) stampedes(ctx context.Context, rng *rand.Rand) {
	for chaosSleep(ctx, chaosMs(rng, 8000, 12000)) {
		lr.mu.Lock()
		close(lr.stampede)
		lr.stampede = make(chan struct{})
		lr.mu.Unlock()
		lr.stampeded.Add(1)
	}
}

func (lr *chaosLines) nextStampede() <-chan struct{} {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	return lr.stampede
}

// waiter makes short Lock calls (see the workloads above).
func (lr *chaosLines) waiter(ctx context.Context, cc *chaosClient, rng *rand.Rand) {
	for {
		stamp := lr.nextStampede()
		t := time.NewTimer(chaosMs(rng, 1000, 3000))
		d := chaosMs(rng, 20, 250)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-stamp:
			t.Stop()
			if rng.IntN(5) == 0 {
				continue
			}
			d = chaosMs(rng, 200, 600) // the crowd stays in line a while
		}
		key := chaosLineKey
		if rng.IntN(10) == 0 {
			key = chaosKeys[rng.IntN(len(chaosKeys))]
		}
		var l *redlock.Lock
		var err error
		if rng.IntN(2) == 0 {
			l, _, err = cc.acquire(ctx, key, d)
		} else {
			wctx, cancel := context.WithTimeout(ctx, d)
			l, _, err = cc.acquire(wctx, key, -1)
			cancel()
		}
		lr.use(ctx, cc, rng, l, err, &lr.waits, &lr.waitsWon)
	}
}

// use counts an acquire call in tried and, when it won (err nil), in won,
// runs a critical section under l and releases it.
func (lr *chaosLines) use(ctx context.Context, cc *chaosClient, rng *rand.Rand, l *redlock.Lock, err error, tried, won *atomic.Int64) {
	tried.Add(1)
	if err != nil {
		return
	}
	won.Add(1)
	lr.r.res.section(ctx, cc, l, rng)
	_, _ = cc.rec.Release(ctx, l)
}

// holder keeps chaosLineKey held for 60–100 s at a time.
func (lr *chaosLines) holder(ctx context.Context, cc *chaosClient, rng *rand.Rand) {
	for ctx.Err() == nil {
		l, _, err := cc.acquire(ctx, chaosLineKey, 20*time.Second)
		if err != nil {
			lr.holdEnded("acquire failed")
			chaosSleep(ctx, chaosMs(rng, 20, 50))
			continue
		}
		lr.holds.Add(1)
		until := time.Now().Add(chaosMs(rng, 60000, 100000))
		pause := chaosMs(rng, 500, 700)
		why := "run ended"
		for chaosSleep(ctx, pause) {
			if !time.Now().Before(until) {
				why = "held its time"
				break
			}
			pause = chaosMs(rng, 500, 700)
			if rng.IntN(4) == 0 {
				lr.r.res.section(ctx, cc, l, rng)
			}
			if _, err := cc.rec.Extend(ctx, l, 0); err != nil {
				// A fault may have cut a round short: try again soon while
				// the lock lasts, so that the key stays held through it.
				if l.Err() != nil || time.Until(l.Deadline()) < 300*time.Millisecond {
					why = "lost"
					break
				}
				pause = chaosMs(rng, 100, 200)
				continue
			}
			lr.holdExtends.Add(1)
		}
		lr.holdEnded(why)
		_, _ = cc.rec.Release(ctx, l)
		chaosSleep(ctx, chaosMs(rng, 0, 2000))
	}
}

// holdEnded counts why a hold of the long holder ended (or an acquire call
// of it failed).
func (lr *chaosLines) holdEnded(why string) {
	lr.mu.Lock()
	lr.holdEnds[why]++
	lr.mu.Unlock()
}

// lockAll takes two keys as one lock: half the time chaosLineKey and
// another, else one of chaosKeys (which the workers' and some waiters' Lock
// calls wait for too) with chaos-d or chaosFloodKey.
func (lr *chaosLines) lockAll(ctx context.Context, cc *chaosClient, rng *rand.Rand) {
	others := append([]string{"chaos-d", chaosFloodKey}, chaosKeys...)
	for chaosSleep(ctx, chaosMs(rng, 500, 2000)) {
		keys := []string{chaosLineKey, others[rng.IntN(len(others))]}
		if rng.IntN(2) == 0 {
			keys = []string{chaosKeys[rng.IntN(len(chaosKeys))], others[rng.IntN(2)]}
		}
		rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
		l, _, err := cc.acquireAll(ctx, keys, chaosMs(rng, 200, 1000))
		lr.use(ctx, cc, rng, l, err, &lr.several, &lr.severalWon)
	}
}

// permitWaiter takes permits of the semaphore named chaosLineKey.
func (lr *chaosLines) permitWaiter(ctx context.Context, cc *chaosClient, rng *rand.Rand) {
	sem := lr.sems[cc]
	for chaosSleep(ctx, chaosMs(rng, 300, 1500)) {
		l, _, err := cc.rec.Permit(ctx, sem, rng.IntN(3) > 0)
		lr.permits.Add(1)
		if err != nil {
			continue
		}
		lr.permitsWon.Add(1)
		if cc.session {
			cc.watch(l)
		}
		lr.r.res.section(ctx, cc, l, rng)
		_, _ = cc.rec.Release(ctx, l)
	}
}

// reader takes chaosFloodKey as a shared holder, again and again.
func (lr *chaosLines) reader(ctx context.Context, cc *chaosClient, rng *rand.Rand) {
	for ctx.Err() == nil {
		wait := time.Duration(0)
		if rng.IntN(4) > 0 {
			wait = chaosMs(rng, 100, 500)
		}
		cctx, call := lr.wf.begin(ctx, cc.name, false)
		l, _, err := cc.acquireShared(cctx, chaosFloodKey, wait)
		lr.wf.finish(call, err == nil)
		if err != nil {
			chaosSleep(ctx, chaosMs(rng, 5, 30))
			continue
		}
		lr.readersWon.Add(1)
		hold := chaosMs(rng, 100, 1500)
		lr.r.res.section(ctx, cc, l, rng)
		if chaosSleep(ctx, hold/2) && rng.IntN(3) == 0 {
			_, _ = cc.rec.Extend(ctx, l, 0)
		}
		if chaosSleep(ctx, hold/2) {
			lr.r.res.section(ctx, cc, l, rng)
		}
		_, _ = cc.rec.Release(ctx, l)
		chaosSleep(ctx, chaosMs(rng, 0, 150))
	}
}

// writer waits for chaosFloodKey alone now and then.
func (lr *chaosLines) writer(ctx context.Context, cc *chaosClient, rng *rand.Rand) {
	for chaosSleep(ctx, chaosMs(rng, 500, 2500)) {
		cctx, call := lr.wf.begin(ctx, cc.name, true)
		l, _, err := cc.acquire(cctx, chaosFloodKey, chaosMs(rng, 2000, 4000))
		lr.wf.finish(call, err == nil)
		if err != nil {
			continue
		}
		lr.writerWon.Add(1)
		lr.r.res.section(ctx, cc, l, rng)
		_, _ = cc.rec.Release(ctx, l)
	}
}

// ---- RES ----

// chaosRawResumes counts the prober's resumes of raw values, by the kind of
// value, and keeps those that returned a lock (RES violations).
type chaosRawResumes struct {
	mu         sync.Mutex
	reads      int            // values read
	tried      map[string]int // resumes, by kind of value
	refused    map[string]int // resumes that failed before any I/O (a plain error), by kind
	notHeld    map[string]int // resumes whose round failed, by kind
	skipped    map[string]int // values not tried: absent, a plain token (resuming it is the API's use), unreachable node
	violations []string
}

// chaosMarkKind names the kind of mark v is, or "" for a value that is no mark.
func chaosMarkKind(v string) string {
	switch {
	case v == "":
		return ""
	case v[0] == '\x1c':
		return "shared"
	case v[0] == '\x1e':
		return "handed"
	case strings.IndexByte(v, '\x1f') >= 0:
		return "session"
	}
	return ""
}

// prober reads a lock key's raw value on a node and resumes it (see the
// workloads above) every 0.2–0.4 s, through cc's Client (not recorded: a
// raw value is no lock's token, and the checker has no lock to judge it
// by).
func (lr *chaosLines) prober(ctx context.Context, cc *chaosClient, rng *rand.Rand) {
	raw := &lr.raw
	for chaosSleep(ctx, chaosMs(rng, 200, 400)) {
		key := chaosFloodKey
		switch rng.IntN(4) {
		case 0:
			key = chaosLineKey
		case 1:
			key = chaosKeys[rng.IntN(len(chaosKeys))]
		}
		i := rng.IntN(len(lr.r.admins))
		gctx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
		v, err := lr.r.admins[i].Get(gctx, rkey(key)).Result()
		cancel()
		kind := chaosMarkKind(v)
		raw.mu.Lock()
		switch {
		case err == redis.Nil:
			raw.skipped["absent"]++
		case err != nil:
			raw.skipped["node unreachable"]++
		case kind == "":
			raw.skipped["plain token"]++
		default:
			raw.reads++
		}
		raw.mu.Unlock()
		if err != nil || kind == "" {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		start := lr.r.h.Now()
		l, err := cc.Client.Resume(rctx, key, v, redlock.WithAutoExtend(false))
		cancel()
		var qe *redlock.QuorumError
		raw.mu.Lock()
		raw.tried[kind]++
		switch {
		case err == nil:
			raw.violations = append(raw.violations, fmt.Sprintf("Resume(%q, %q) with the value node%d held (a %s key's) returned a lock held alone (token %q, deadline in %v), called at %v",
				key, v, i, kind, l.Token(), time.Until(l.Deadline()).Round(time.Millisecond), us(start)))
		case errors.As(err, &qe):
			raw.notHeld[kind]++
		default:
			raw.refused[kind]++
		}
		raw.mu.Unlock()
		// A lock returned by mistake is left to lapse (not auto-extended):
		// releasing it would delete the key its shared holders rely on.
	}
}

func (raw *chaosRawResumes) summary() string {
	raw.mu.Lock()
	defer raw.mu.Unlock()
	return fmt.Sprintf("%d marks read raw and resumed (%s): refused before any I/O %s, failed on the nodes %s, returned a lock %d; not tried: %s",
		raw.reads, formatOr(raw.tried, "none"), formatOr(raw.refused, "none"), formatOr(raw.notHeld, "none"), len(raw.violations), formatOr(raw.skipped, "none"))
}

func (raw *chaosRawResumes) cases() (n int, violations []string) {
	raw.mu.Lock()
	defer raw.mu.Unlock()
	for _, c := range raw.tried {
		n += c
	}
	return n, append([]string(nil), raw.violations...)
}

// ---- report ----

// chaosLineProps is what the workloads' properties found: per property, the
// cases judged and the violations.
type chaosLineProps struct {
	cases      map[string]int
	violations map[string][]string // described
	counts     map[string]int      // violations counted (ERR: every error reply; the others: one per description)
}

var chaosLineProperties = []string{"WF", "LB", "ERR", "RES"}

// judge judges WF, LB, ERR and RES, logs what each found, and fails the
// test on every violation (the first 20 of each property in full).
func (lr *chaosLines) judge() *chaosLineProps {
	t := lr.r.t
	// One more sample of the lines, now that every Client is closed.
	lr.lb.sample(2*time.Second, lr.r.h)
	p := &chaosLineProps{cases: map[string]int{}, violations: map[string][]string{}, counts: map[string]int{}}
	wf := lr.wf.judge(lr.r.f.faultSpans(lr.r.h.Now()))
	p.cases["WF"], p.violations["WF"] = wf.judged, wf.violations
	lbv, lbs := lr.lb.report()
	lr.lb.mu.Lock()
	p.cases["LB"] = lr.lb.cases
	lr.lb.mu.Unlock()
	p.violations["LB"] = lbv
	errv, nerr, errs := lr.r.errs.report()
	p.cases["ERR"] = int(lr.r.errs.scripts.Load())
	p.violations["ERR"] = errv
	p.cases["RES"], p.violations["RES"] = lr.raw.cases()
	for _, prop := range chaosLineProperties {
		p.counts[prop] = len(p.violations[prop])
	}
	p.counts["ERR"] = nerr
	lr.mu.Lock()
	ends := formatOr(lr.holdEnds, "none")
	lr.mu.Unlock()
	t.Logf("lines: %d waiter calls (%d won) on %s and %v, %d stampedes; the holder of %s: %d acquisitions, %d extends (holds ended: %s); %d locks of several keys held of %d calls; %d permits of %s held of %d calls; flood of %s: %d shared holders admitted, %d writers won",
		lr.waits.Load(), lr.waitsWon.Load(), chaosLineKey, chaosKeys, lr.stampeded.Load(), chaosLineKey, lr.holds.Load(), lr.holdExtends.Load(), ends,
		lr.severalWon.Load(), lr.several.Load(), lr.permitsWon.Load(), chaosLineKey, lr.permits.Load(), chaosFloodKey, lr.readersWon.Load(), lr.writerWon.Load())
	t.Logf("WF (writers first): %s", wf)
	t.Logf("LB (line bounds): %s", lbs)
	t.Logf("ERR (script error replies): %s", errs)
	t.Logf("RES (raw values resumed): %s", lr.raw.summary())
	for _, prop := range chaosLineProperties {
		vs := p.violations[prop]
		for i, v := range vs {
			if i == 20 {
				t.Errorf("%s: %d more violations", prop, len(vs)-20)
				break
			}
			t.Errorf("%s violated: %s", prop, v)
		}
	}
	lr.lb.mu.Lock()
	rounds := lr.lb.rounds
	lr.lb.mu.Unlock()
	if rounds == 0 {
		t.Errorf("LB: the lines were never sampled")
	}
	return p
}

// checked lists the properties with their cases, as checkedList does.
func (p *chaosLineProps) checked() string {
	var parts []string
	for _, prop := range chaosLineProperties {
		parts = append(parts, fmt.Sprintf("%s (%d)", prop, p.cases[prop]))
	}
	return strings.Join(parts, ", ")
}

// violated lists the properties violated with their counts ("" when none).
func (p *chaosLineProps) violated() string {
	var parts []string
	for _, prop := range chaosLineProperties {
		if n := p.counts[prop]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s: %d", prop, n))
		}
	}
	return strings.Join(parts, ", ")
}

// brief is the workloads' part of a progress line.
func (lr *chaosLines) brief() string {
	lr.lb.mu.Lock()
	q, x, g := lr.lb.largest['q'], lr.lb.largest['x'], lr.lb.largest['g']
	over := len(lr.lb.over)
	lr.lb.mu.Unlock()
	return fmt.Sprintf("lines: %d waiter calls, %d shared holders, %d writers; largest q %d, x %d, g %d; %d sets over their bound",
		lr.waits.Load(), lr.readersWon.Load(), lr.writerWon.Load(), q, x, g, over)
}
