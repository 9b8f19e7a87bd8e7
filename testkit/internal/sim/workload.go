package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/quorumlock/quorumlock/redlock"
	"github.com/quorumlock/quorumlock/testkit/history"
)

// worker is one client's workload: a redlock.Client whose calls are
// recorded, playing s.ops operations drawn from its own generator on a few
// keys: TryLock and Lock (waiting up to 2 TTLs), critical sections, Extend
// with TTLs shorter and longer than the lock's, Release, abandoning a lock
// to its TTL, and Do; in one operation of six, the same with a lock of
// several keys (TryLockAll, LockAll, DoAll; see several); and in one of
// six, the same as a shared holder of one of the keys the others take
// alone (TryLock, Lock and Do with redlock.Shared; see shared). In the
// schedules that play them (schedule.prims), one operation in three is
// instead a permit of a semaphore, a campaign or a read of the leader
// (primitives.go).
type worker struct {
	name  string
	id    int        // the client's index in the schedule
	nodes []*simNode // read raw by the raw-resume workload
	s     schedule
	c     *redlock.Client
	h     *history.History
	rec   *history.Recorder
	tr    *tracer
	r     *rand.Rand
	ctx   context.Context
	t0    time.Time // the schedule's start
	// stalls are the client's stalls (stall.go): it starts nothing while
	// one is under way (wake); probes records what ST judges of the
	// stall workload's clients (work_stall.go).
	stalls []clientStall
	probes *stProbes
	wk     *wkLog // WK's violations (work_turns.go)

	resumed, resumeFailed int // Resume calls that returned a lock, and failed
	// tried and held count the acquire calls of locks of several keys and
	// those that returned a lock (DoAll's included).
	tried, held int
	// sharedTried and sharedHeld count the acquire calls of shared holders
	// and those that returned a lock (Do's included).
	sharedTried, sharedHeld int
	// permitTried and permitHeld count the permit acquire calls and those
	// that returned a permit; campaigns and leaders the Campaign calls and
	// those that won; reads the leaders read (Leader, Observe).
	permitTried, permitHeld, campaigns, leaders, reads int

	// auto holds the auto-extended locks of several keys a schedule of
	// plain locks takes: their deadlines move with their own renewals, so
	// their holders record what they read (history.Lease), as session
	// locks' do.
	auto map[*redlock.Lock]bool
	// abandoned holds the tokens of the locks it abandoned (never
	// released): the only tokens of its own it may take back by Resume
	// (resumeRaw).
	abandoned map[string]bool
}

// abandon notes that the lock of token was abandoned to its TTL.
func (w *worker) abandon(token string) {
	if w.abandoned == nil {
		w.abandoned = map[string]bool{}
	}
	w.abandoned[token] = true
}

func (w *worker) run() {
	if w.s.work != mixed {
		w.play()
		return
	}
	time.Sleep(w.upTo(w.s.ttl / 4)) // the clients start apart
	for range w.s.ops {
		w.wake()
		if w.s.prims && w.r.IntN(3) == 0 {
			w.primitive()
			time.Sleep(w.upTo(w.s.ttl / 2))
			continue
		}
		w.mixedStep()
		time.Sleep(w.upTo(w.s.ttl / 2))
	}
}

// mixedStep is one operation of the mixed workload on the shared keys: a
// Do, a lock of several keys, a shared holder or (half the time) a hold.
func (w *worker) mixedStep() {
	switch x := w.r.IntN(12); {
	case x < 2:
		w.do(w.key())
	case x < 4:
		w.several()
	case x < 6:
		w.shared(w.key())
	default:
		w.hold(w.key())
	}
}

// key draws one of the schedule's keys.
func (w *worker) key() string { return fmt.Sprintf("k%d", w.r.IntN(w.s.keys)) }

// someKeys draws a set of keys for a lock of several keys: two or three
// (one in six: one alone, which TryLockAll takes too) of the schedule's
// keys and one more key that only such locks take, in a random order. Sets
// overlap each other and the locks of one key in every way: {k0, k1} and
// {k1, k2} share one key; with the schedule's one key k0, {k0, k1} takes it
// from the locks of k0 alone.
func (w *worker) someKeys() []string {
	keys := make([]string, w.s.keys+1)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%d", i)
	}
	w.r.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	n := 2 + w.r.IntN(2)
	if w.r.IntN(6) == 0 {
		n = 1
	}
	return keys[:min(n, len(keys))]
}

// several takes a set of keys as one lock (see someKeys): with DoAll (one in
// four), else with TryLockAll or LockAll, held like hold's locks: fenced in
// the schedules with fencing, auto-extended in the schedules of sessions
// (a lock of several keys renews itself, not through a session) and in one
// in three of the others; an auto-extended lock is never abandoned (its
// renewals would keep it), and none is resumed (Resume takes one key).
func (w *worker) several() {
	keys := w.someKeys()
	if w.r.IntN(4) == 0 {
		w.doAll(keys)
		return
	}
	wait := []time.Duration{0, w.s.ttl, 2 * w.s.ttl}[w.r.IntN(3)]
	var opts []redlock.Option
	auto := w.s.sessions
	if !auto && w.r.IntN(3) == 0 {
		auto, opts = true, []redlock.Option{redlock.WithAutoExtend(true)}
	}
	l, _, err := w.rec.AcquireAll(w.ctx, keys, wait, opts...)
	w.trace("%s acquire all %q (wait %v, auto-extended %v): %v", w.name, keys, wait, auto, errOf(err))
	w.count(err)
	if l == nil {
		return
	}
	w.keep(l, auto, fmt.Sprintf("%q", keys))
}

// keep uses l and releases it, or, one time in 8 when it is not
// auto-extended, abandons it to its TTL (traced as what); an auto-extended
// lock outside the schedules of sessions is watched meanwhile (w.auto).
func (w *worker) keep(l *redlock.Lock, auto bool, what string) {
	if auto && !w.s.sessions {
		if w.auto == nil {
			w.auto = map[*redlock.Lock]bool{}
		}
		w.auto[l] = true
		defer delete(w.auto, l)
	}
	w.use(l)
	if !auto && w.r.IntN(8) == 0 {
		w.trace("%s abandons %s token %s", w.name, what, short(l.Token()))
		w.abandon(l.Token())
		return
	}
	w.release(l)
}

// shared takes key as one of its shared holders: with Do (one in four),
// else with TryLock or Lock (waiting up to 2 TTLs, behind the waiters for
// the key alone: writers first), held like hold's locks (unfenced: fences
// order writers; auto-extended in the schedules of sessions, on its own
// renewals, and in one in four of the others). An auto-extended one is
// never abandoned, and none is resumed (Resume does not take shared
// holders).
func (w *worker) shared(key string) {
	opts := []redlock.Option{redlock.Shared(), redlock.WithFencing(false)}
	if w.r.IntN(4) == 0 {
		w.doShared(key, opts)
		return
	}
	wait := []time.Duration{0, w.s.ttl, 2 * w.s.ttl}[w.r.IntN(3)]
	auto := w.s.sessions
	if !auto && w.r.IntN(4) == 0 {
		auto, opts = true, append(opts, redlock.WithAutoExtend(true))
	}
	l, _, err := w.rec.Acquire(w.ctx, key, wait, opts...)
	w.trace("%s acquire shared %q (wait %v, auto-extended %v): %v", w.name, key, wait, auto, errOf(err))
	w.sharedTried++
	if l == nil {
		return
	}
	w.sharedHeld++
	if !l.Shared() {
		w.tr.fail("%s: a lock of %q acquired with Shared says it is not shared", w.name, key)
	}
	w.keep(l, auto, fmt.Sprintf("shared %q", key))
}

// doShared runs a critical section with Do as a shared holder of key,
// waiting up to 3 TTLs.
func (w *worker) doShared(key string, opts []redlock.Option) {
	ctx, cancel := context.WithTimeout(w.ctx, 3*w.s.ttl)
	defer cancel()
	d := w.upTo(w.s.ttl / 2)
	ran := false
	err := w.rec.Do(ctx, key, func(context.Context) error {
		ran = true
		time.Sleep(d)
		return nil
	}, opts...)
	w.sharedTried++
	if ran {
		w.sharedHeld++
	}
	w.trace("%s do shared %q: %v", w.name, key, errOf(err))
}

// upTo is a random duration in (0, d].
func (w *worker) upTo(d time.Duration) time.Duration {
	return time.Duration(w.r.Int64N(int64(max(d, 1)))) + 1
}

// hold takes key, uses it a few times and releases or abandons it.
func (w *worker) hold(key string) {
	wait := []time.Duration{0, w.s.ttl, 2 * w.s.ttl}[w.r.IntN(3)]
	l, _, err := w.rec.Acquire(w.ctx, key, wait)
	w.trace("%s acquire %q (wait %v): %v", w.name, key, wait, errOf(err))
	if l == nil {
		return
	}
	w.use(l)
	if !w.s.sessions && w.r.IntN(8) == 0 { // a session lock would be renewed on
		w.trace("%s abandons %q token %s", w.name, key, short(l.Token()))
		w.abandon(l.Token())
		if w.r.IntN(2) == 0 {
			w.resume(key, l.Token())
		}
		return
	}
	w.release(l)
}

// use reads l's deadline and uses l a few times: critical sections,
// extends, pauses.
func (w *worker) use(l *redlock.Lock) {
	w.deadline(l)
	for range w.r.IntN(4) {
		w.wake()
		switch w.r.IntN(3) {
		case 0:
			w.section(l)
		case 1:
			// A TTL shorter or longer than the lock's: a late extend of a
			// shorter one must not cut a later, longer one short.
			ttl := max(time.Duration(float64(w.s.ttl)*(0.3+3*w.r.Float64())), 2*w.s.nodeTimeout+10*time.Millisecond)
			_, err := w.rec.Extend(w.ctx, l, ttl.Truncate(time.Millisecond))
			w.trace("%s extend %q token %s by %v: %v", w.name, l.Keys(), short(l.Token()), ttl, errOf(err))
		default:
			time.Sleep(w.upTo(w.s.ttl / 3))
		}
	}
}

// leased reports whether l's deadline moves by itself (a session lock, an
// auto-extended lock of several keys): its holder records what it reads.
func (w *worker) leased(l *redlock.Lock) bool { return w.s.sessions || w.auto[l] }

// resume takes back, by its token, a lock it abandoned, as a process that
// restarted would: a while later, sometimes after its TTL (the lock is lost
// then, and must stay so); it uses the lock and releases it.
func (w *worker) resume(key, token string) {
	time.Sleep(w.upTo(w.s.ttl * 6 / 5))
	w.wake()
	l, _, err := w.rec.Resume(w.ctx, key, token, 0)
	w.trace("%s resume %q token %s: %v", w.name, key, short(token), errOf(err))
	if l == nil {
		w.resumeFailed++
		return
	}
	w.resumed++
	if w.r.IntN(2) == 0 {
		w.section(l)
	}
	w.release(l)
}

// release releases l; a session lock's Done (an auto-extended one's) must
// then close.
func (w *worker) release(l *redlock.Lock) {
	w.wake()
	delete(w.abandoned, l.Token()) // released: no longer its to take back
	key := l.Keys()
	_, err := w.rec.Release(w.ctx, l)
	w.trace("%s release %q token %s: %v", w.name, key, short(l.Token()), errOf(err))
	if w.leased(l) {
		select {
		case <-l.Done():
			w.lease(l, l.Deadline(), true)
		case <-time.After(10 * w.s.ttl):
			w.tr.fail("%s: Release of %q returned (%v) and Done has not closed %v later", w.name, key, err, 10*w.s.ttl)
		}
	}
}

// deadline reads l's deadline, as a holder does before it acts; for a
// session lock, whose deadline moves with its session, and an auto-extended
// one, it records what it read (history.Lease).
func (w *worker) deadline(l *redlock.Lock) time.Time {
	d := l.Deadline()
	if w.leased(l) {
		w.lease(l, d, false)
	}
	return d
}

func (w *worker) lease(l *redlock.Lock, d time.Time, done bool) {
	key, _, _ := w.rec.KeyOf(l) // a permit's is its PermitKey
	w.h.AddLease(history.Lease{Client: w.name, Key: key, Token: l.Token(), At: w.h.Now(), Deadline: w.h.Since(d), Done: done})
}

// section runs a critical section that ends before the lock's deadline.
func (w *worker) section(l *redlock.Lock) {
	w.wake()
	left := time.Until(w.deadline(l))
	if left <= 0 {
		return
	}
	d := w.upTo(left * 9 / 10)
	w.rec.Section(l, func() error {
		time.Sleep(d)
		return nil
	})
}

// do runs a critical section with Do, waiting up to 3 TTLs for the lock.
func (w *worker) do(key string) {
	ctx, cancel := context.WithTimeout(w.ctx, 3*w.s.ttl)
	defer cancel()
	d := w.upTo(w.s.ttl / 2)
	err := w.rec.Do(ctx, key, func(context.Context) error {
		time.Sleep(d)
		return nil
	})
	w.trace("%s do %q: %v", w.name, key, errOf(err))
}

// doAll runs a critical section with DoAll, waiting up to 3 TTLs for the
// keys.
func (w *worker) doAll(keys []string) {
	ctx, cancel := context.WithTimeout(w.ctx, 3*w.s.ttl)
	defer cancel()
	d := w.upTo(w.s.ttl / 2)
	ran := false
	err := w.rec.DoAll(ctx, keys, func(context.Context) error {
		ran = true
		time.Sleep(d)
		return nil
	})
	if ran {
		err = nil // it held the keys: count it so
	}
	w.count(err)
	w.trace("%s do all %q: %v", w.name, keys, errOf(err))
}

// count counts an acquire call of a lock of several keys.
func (w *worker) count(err error) {
	w.tried++
	if err == nil {
		w.held++
	}
}

// trace adds a line to the trace when it is on (the arguments are not
// formatted otherwise: an error's text costs as much as a command).
func (w *worker) trace(format string, args ...any) {
	if w.tr.on {
		w.tr.add(format, args...)
	}
}

// errOf is err for the trace, "ok" when nil.
func errOf(err error) any {
	if err == nil {
		return "ok"
	}
	return err
}

// tokens makes a client's lock tokens, prefix-n, and remembers them for
// the Recorder (history.Tokens): the same in every replay of a seed, so
// that traces compare.
type tokens struct {
	prefix string

	mu  sync.Mutex
	all []string
}

var _ history.Tokens = (*tokens)(nil)

func (t *tokens) Generate() (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	tok := fmt.Sprintf("%s-%06d", t.prefix, len(t.all)+1)
	t.all = append(t.all, tok)
	return tok, nil
}

func (t *tokens) Count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.all)
}

func (t *tokens) Since(n int) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.all[min(n, len(t.all)):]...)
}
