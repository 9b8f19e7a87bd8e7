package history

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/redlock"
)

// Recorder records the lock calls and critical sections of one client of a
// redlock.Client in a History, on the History's clock. Make one with
// History.Recorder. Its methods are safe for concurrent use; several
// goroutines may share one Recorder (their operations carry one client
// name, and Check tells holders apart by token). Locks of a Client with
// redlock.WithAutoExtend are session locks, whose deadlines move with their
// session: give such a Recorder WithSessionKey and record the deadlines its
// holders read (History.AddLease), or Check judges them as plain locks that
// end at their first deadline.
type Recorder struct {
	h      *History
	name   string
	c      *redlock.Client
	ttl    time.Duration
	tokens Tokens
	// session, if set, returns the session key of a session lock, "" for
	// any other.
	session func(*redlock.Lock) string
	// permits holds, by token, the number of permits of the semaphore of
	// each permit this Recorder acquired (a Lock does not tell it).
	permits   sync.Map
	observers atomic.Int64 // Observe calls so far
}

// Tokens lists the tokens a client's acquire rounds used so far, in order.
// A Recorder given one records, for each acquire call, the tokens of its
// rounds that did not win (Op.Tried), which Check looks for on the nodes
// (L2: nothing left behind). TokenLog is one.
type Tokens interface {
	// Count returns how many tokens were used so far.
	Count() int
	// Since returns the tokens used after the first n, in order.
	Since(n int) []string
}

// RecorderOption configures a Recorder.
type RecorderOption func(*Recorder)

// WithTTL tells the Recorder the TTL to record (Op.TTL) for a call whose
// lock's TTL it cannot read: a failed acquire or Resume without a per-call
// redlock.WithTTL. Without it, the Client's (redlock.Client.TTL). A
// successful call always records its lock's own TTL (redlock.Lock.TTL).
func WithTTL(ttl time.Duration) RecorderOption { return func(r *Recorder) { r.ttl = ttl } }

// WithTokens makes the Recorder record the tokens of failed rounds (see
// Tokens); the Client must take its tokens from t (for a TokenLog, with
// redlock.WithTokenGenerator(t.Generate)).
func WithTokens(t Tokens) RecorderOption { return func(r *Recorder) { r.tokens = t } }

// WithSessionKey tells the Recorder how to find the session key of a
// session lock (auto-extended locks on a renewal session, whose deadlines
// the History learns from Leases); f returns "" for other locks.
func WithSessionKey(f func(*redlock.Lock) string) RecorderOption {
	return func(r *Recorder) { r.session = f }
}

// Recorder returns a Recorder of client c's calls under the name client.
func (h *History) Recorder(client string, c *redlock.Client, opts ...RecorderOption) *Recorder {
	r := &Recorder{h: h, name: client, c: c}
	for _, o := range opts {
		o(r)
	}
	if r.ttl == 0 && c != nil {
		r.ttl = c.TTL()
	}
	r.ttl = cmp.Or(r.ttl, redlock.DefaultTTL)
	return r
}

// Client returns the recorded client's redlock.Client.
func (r *Recorder) Client() *redlock.Client { return r.c }

// TryLock calls Client.TryLock, records the call (an Acquire Op; with
// redlock.Shared, a successful one has Op.Shared) and returns what TryLock
// returned.
func (r *Recorder) TryLock(ctx context.Context, key string, opts ...redlock.Option) (*redlock.Lock, error) {
	l, _, err := r.Acquire(ctx, key, 0, opts...)
	return l, err
}

// Lock calls Client.Lock, records the call and returns what Lock returned.
func (r *Recorder) Lock(ctx context.Context, key string, opts ...redlock.Option) (*redlock.Lock, error) {
	l, _, err := r.Acquire(ctx, key, -1, opts...)
	return l, err
}

// Acquire calls TryLock (wait 0), Lock (wait < 0) or Lock with
// redlock.WithMaxWait(wait), records the call and returns the lock (nil on
// failure), the record and the call's error.
func (r *Recorder) Acquire(ctx context.Context, key string, wait time.Duration, opts ...redlock.Option) (*redlock.Lock, Op, error) {
	return r.acquire(ctx, []string{key}, false, wait, opts)
}

// AcquireShared is Acquire with redlock.Shared: it takes key as one of
// its shared holders, and records the call as shared (Op.Shared) whatever
// its outcome, so that a refusal is known to be a shared holder's (LV).
func (r *Recorder) AcquireShared(ctx context.Context, key string, wait time.Duration, opts ...redlock.Option) (*redlock.Lock, Op, error) {
	return r.acquireAs(ctx, []string{key}, false, true, wait, append(slices.Clip(opts), redlock.Shared()))
}

// TryLockAll calls Client.TryLockAll, records the call (an Acquire Op with
// Keys) and returns what TryLockAll returned.
func (r *Recorder) TryLockAll(ctx context.Context, keys []string, opts ...redlock.Option) (*redlock.Lock, error) {
	l, _, err := r.AcquireAll(ctx, keys, 0, opts...)
	return l, err
}

// LockAll calls Client.LockAll, records the call and returns what LockAll
// returned.
func (r *Recorder) LockAll(ctx context.Context, keys []string, opts ...redlock.Option) (*redlock.Lock, error) {
	l, _, err := r.AcquireAll(ctx, keys, -1, opts...)
	return l, err
}

// AcquireAll is Acquire for a lock of several keys: it calls TryLockAll
// (wait 0), LockAll (wait < 0) or LockAll with redlock.WithMaxWait(wait),
// records the call (Op.Keys holds keys, Op.Key the first) and returns the
// lock (nil on failure), the record and the call's error.
func (r *Recorder) AcquireAll(ctx context.Context, keys []string, wait time.Duration, opts ...redlock.Option) (*redlock.Lock, Op, error) {
	return r.acquire(ctx, slices.Clone(keys), true, wait, opts)
}

// acquire is Acquire (keys: the one key) and, with all, AcquireAll.
func (r *Recorder) acquire(ctx context.Context, keys []string, all bool, wait time.Duration, opts []redlock.Option) (*redlock.Lock, Op, error) {
	return r.acquireAs(ctx, keys, all, false, wait, opts)
}

// acquireAs is acquire, recording the call as a shared holder's when
// shared (opts then hold redlock.Shared).
func (r *Recorder) acquireAs(ctx context.Context, keys []string, all, shared bool, wait time.Duration, opts []redlock.Option) (*redlock.Lock, Op, error) {
	n0 := r.tokenCount()
	op := Op{Client: r.name, Kind: Acquire, TTL: r.callTTL(opts, shared), Wait: max(wait, -1), Shared: shared, Start: r.h.Now()}
	if len(keys) > 0 {
		op.Key = keys[0]
	}
	if all && len(keys) > 0 {
		op.Keys = keys
	}
	if wait > 0 {
		opts = append(slices.Clip(opts), redlock.WithMaxWait(wait))
	}
	var l *redlock.Lock
	var err error
	switch {
	case all && wait == 0:
		l, err = r.c.TryLockAll(ctx, keys, opts...)
	case all:
		l, err = r.c.LockAll(ctx, keys, opts...)
	case wait == 0:
		l, err = r.c.TryLock(ctx, op.Key, opts...)
	default:
		l, err = r.c.Lock(ctx, op.Key, opts...)
	}
	return l, r.finishAcquire(op, n0, ctx, l, err), err
}

// callTTL is the TTL to record for an acquire call with opts (with shared,
// the last is the Recorder's redlock.Shared) before its lock can tell: the
// Recorder's, or 0 (unknown: Check then assumes the longest TTL of the run)
// when the caller's options, which are opaque, may set another.
func (r *Recorder) callTTL(opts []redlock.Option, shared bool) time.Duration {
	if shared && len(opts) > 0 {
		opts = opts[:len(opts)-1]
	}
	if len(opts) > 0 {
		return 0
	}
	return r.ttl
}

// Extend calls l.Extend(ctx, ttl) (ttl 0: the lock's own TTL), records the
// call and returns the record and Extend's error.
func (r *Recorder) Extend(ctx context.Context, l *redlock.Lock, ttl time.Duration) (Op, error) {
	op := Op{Client: r.name, Keys: several(l), Shared: l.Shared(), Kind: Extend, TTL: cmp.Or(ttl, l.TTL()), Token: l.Token(), Fence: l.Fence(),
		Start: r.h.Now(), Session: r.sessionKey(l)}
	op.Key, op.Semaphore, op.Permits = r.keyOf(l)
	err := l.Extend(ctx, ttl)
	deadline := l.Deadline() // as the call returned (see Acquire)
	op.End = r.h.Now()
	r.finish(&op, ctx, err)
	op.Deadline = r.h.Since(deadline)
	r.h.Add(op)
	return op, err
}

// Resume calls Client.Resume(ctx, key, token) with redlock.WithTTL(ttl)
// (ttl 0: the Recorder's TTL, and no option), records the call as an
// Extend of token (to the checker, a resumed handle is the lock it resumes,
// and what it confirms lengthens that lock's window) and returns the lock
// (nil on failure), the record and Resume's error.
func (r *Recorder) Resume(ctx context.Context, key, token string, ttl time.Duration) (*redlock.Lock, Op, error) {
	var opts []redlock.Option
	if ttl != 0 {
		opts = append(opts, redlock.WithTTL(ttl))
	}
	op := Op{Client: r.name, Key: key, Kind: Extend, TTL: cmp.Or(ttl, r.ttl), Token: token, Resumed: true, Start: r.h.Now()}
	l, err := r.c.Resume(ctx, key, token, opts...)
	var deadline time.Time
	if err == nil {
		deadline = l.Deadline() // as the call returned (see Acquire)
	}
	op.End = r.h.Now()
	r.finish(&op, ctx, err)
	if err == nil {
		op.Deadline, op.TTL = r.h.Since(deadline), l.TTL()
	}
	r.h.Add(op)
	return l, op, err
}

// Release calls l.Release, records the call and returns the record and
// Release's error.
func (r *Recorder) Release(ctx context.Context, l *redlock.Lock) (Op, error) {
	op := Op{Client: r.name, Keys: several(l), Shared: l.Shared(), Kind: Release, Token: l.Token(), Fence: l.Fence(), Start: r.h.Now()}
	op.Key, op.Semaphore, op.Permits = r.keyOf(l)
	err := l.Release(ctx)
	op.End = r.h.Now()
	r.finish(&op, ctx, err)
	r.h.Add(op)
	return op, err
}

// Section runs fn as a critical section under l and records when it ran
// (a Section: SEC checks that no two overlap), also when fn panics; it
// returns fn's error.
func (r *Recorder) Section(l *redlock.Lock, fn func() error) (err error) {
	sec := Section{Client: r.name, Keys: several(l), Shared: l.Shared(), Token: l.Token(), Fence: l.Fence(), Start: r.h.Now()}
	sec.Key, sec.Semaphore, sec.Permits = r.keyOf(l)
	defer func() {
		sec.End = r.h.Now()
		if err != nil {
			sec.Err = err.Error()
		}
		r.h.AddSection(sec)
	}()
	return fn()
}

// Do is Client.Do, recorded, without auto-extension: the lock lives for
// its TTL. It waits for the lock with Lock (opts apply, then
// WithAutoExtend(false)), runs fn under it as a recorded Section with a
// context that ends when the lock is lost or released, and releases the
// lock when fn returns or panics. It returns fn's error, joined with one
// matching redlock.ErrLockLost if the lock was lost while fn ran, or else
// with Release's error; Lock's error without calling fn; and an error for a
// nil fn.
func (r *Recorder) Do(ctx context.Context, key string, fn func(ctx context.Context) error, opts ...redlock.Option) error {
	return r.do(ctx, []string{key}, false, fn, opts)
}

// DoAll is Do for a lock of several keys (Client.DoAll, recorded, without
// auto-extension): it waits for them with LockAll, and its Section covers
// every key (Section.Keys). Its results are Do's.
func (r *Recorder) DoAll(ctx context.Context, keys []string, fn func(ctx context.Context) error, opts ...redlock.Option) error {
	return r.do(ctx, slices.Clone(keys), true, fn, opts)
}

// do is Do (keys: the one key) and, with all, DoAll.
func (r *Recorder) do(ctx context.Context, keys []string, all bool, fn func(ctx context.Context) error, opts []redlock.Option) (err error) {
	name, what := strings.Join(keys, ", "), "Do"
	if all {
		what = "DoAll"
	}
	if fn == nil {
		return fmt.Errorf("history: %s %q: fn is nil", what, name)
	}
	l, _, err := r.acquire(ctx, keys, all, -1, slices.Concat(opts, []redlock.Option{redlock.WithAutoExtend(false)}))
	if err != nil {
		return err
	}
	lctx, cancel := l.Context(ctx)
	defer func() {
		cancel()
		lost := l.Err()
		_, rerr := r.Release(context.WithoutCancel(ctx), l)
		switch {
		case errors.Is(lost, redlock.ErrLockLost):
			err = errors.Join(err, fmt.Errorf("history: %s %q: the lock was lost while fn ran: %w", what, name, redlock.ErrLockLost))
		case rerr != nil:
			err = errors.Join(err, rerr)
		}
	}()
	return r.Section(l, func() error { return fn(lctx) })
}

// KeyOf returns the key Check judges l by (for a semaphore's permit that
// this Recorder acquired, PermitKey of its semaphore and permit; else
// l.Key()), and for a permit the semaphore's name and number of permits
// (Op.Semaphore, Op.Permits; Section's too).
func (r *Recorder) KeyOf(l *redlock.Lock) (key, semaphore string, permits int) { return r.keyOf(l) }

func (r *Recorder) keyOf(l *redlock.Lock) (key, semaphore string, permits int) {
	if l.Permit() < 0 {
		return l.Key(), "", 0
	}
	k, _ := r.permits.Load(l.Token())
	n, _ := k.(int)
	return PermitKey(l.Key(), l.Permit()), l.Key(), n
}

// several returns the keys of l, a lock of several keys, or nil for a lock
// of one key.
func several(l *redlock.Lock) []string {
	if keys := l.Keys(); len(keys) > 1 {
		return keys
	}
	return nil
}

// finish sets the outcome and error of op from the call's error.
func (r *Recorder) finish(op *Op, ctx context.Context, err error) {
	op.Outcome = outcomeOf(ctx, err)
	if err == nil {
		return
	}
	op.Err = err.Error()
	var qe *redlock.QuorumError
	if errors.As(err, &qe) {
		op.Quorum, op.Agreed = qe.Quorum, qe.Agreed()
	}
}

// outcomeOf classifies a call's error: a call cut short by its context is
// indefinite (it may have taken effect), as is any error that is not a
// definite refusal.
func outcomeOf(ctx context.Context, err error) Outcome {
	switch {
	case err == nil:
		return OK
	case ctx.Err() != nil:
		return Indefinite
	case errors.Is(err, redlock.ErrLockLost):
		return Lost
	case errors.Is(err, redlock.ErrNotAcquired), errors.Is(err, redlock.ErrNotHeld):
		return Failed
	}
	return Indefinite
}

func (r *Recorder) tokenCount() int {
	if r.tokens == nil {
		return 0
	}
	return r.tokens.Count()
}

func (r *Recorder) sessionKey(l *redlock.Lock) string {
	if r.session == nil {
		return ""
	}
	return r.session(l)
}

// TokenLog is a token generator that remembers what it generated: give
// Generate to redlock.WithTokenGenerator and the TokenLog to WithTokens.
// Tokens are "prefix-n-random" (n counts from 1), so that a leftover names
// its client and no two runs share a token. It is safe for concurrent use;
// the zero value has no prefix.
type TokenLog struct {
	Prefix string

	mu     sync.Mutex
	tokens []string
}

// Generate returns a new token and remembers it; it never fails.
func (g *TokenLog) Generate() (string, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	tok := fmt.Sprintf("%s-%d-%08x", g.Prefix, len(g.tokens)+1, rand.Uint32())
	g.tokens = append(g.tokens, tok)
	return tok, nil
}

// Count returns how many tokens Generate returned.
func (g *TokenLog) Count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.tokens)
}

// Since returns the tokens generated after the first n, in order.
func (g *TokenLog) Since(n int) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.tokens[min(n, len(g.tokens)):])
}

// Permit takes a permit of s, with TryAcquire (wait false) or Acquire,
// records the call (an Acquire Op with Semaphore and Permits; a successful
// one's Key is the permit's PermitKey) and returns the permit (nil on
// failure), the record and the call's error. Record the permit's Extend,
// Release and Sections through this Recorder: it knows their semaphore.
func (r *Recorder) Permit(ctx context.Context, s *redlock.Semaphore, wait bool) (*redlock.Lock, Op, error) {
	n0 := r.tokenCount()
	op := Op{Client: r.name, Kind: Acquire, TTL: r.ttl, Key: s.Name(), Semaphore: s.Name(), Permits: s.Permits(), Start: r.h.Now()}
	if wait {
		op.Wait = -1
	}
	var l *redlock.Lock
	var err error
	if wait {
		l, err = s.Acquire(ctx)
	} else {
		l, err = s.TryAcquire(ctx)
	}
	return l, r.finishAcquire(op, n0, ctx, l, err), err
}

// Campaign calls Client.Campaign, records the call (an Acquire Op with
// Election) and returns the leader's lock (nil on failure), the record and
// the call's error. The lock is auto-extended: record the deadlines its
// holder reads (History.AddLease), or Check ends its window at its first
// deadline.
func (r *Recorder) Campaign(ctx context.Context, name, value string, opts ...redlock.Option) (*redlock.Lock, Op, error) {
	n0 := r.tokenCount()
	op := Op{Client: r.name, Kind: Acquire, TTL: r.ttl, Key: name, Election: true, Wait: -1, Start: r.h.Now()}
	l, err := r.c.Campaign(ctx, name, value, opts...)
	return l, r.finishAcquire(op, n0, ctx, l, err), err
}

// finishAcquire completes op, an acquire call that returned l and err
// (its Client's tokens counted n0 before it), records it and returns it. A
// semaphore's permit is recorded under its PermitKey.
func (r *Recorder) finishAcquire(op Op, n0 int, ctx context.Context, l *redlock.Lock, err error) Op {
	var deadline time.Time
	if err == nil {
		// A session lock's deadline moves with its session's renewals:
		// read it as the call returned, before a renewal can move it.
		deadline = l.Deadline()
	}
	op.End = r.h.Now()
	r.finish(&op, ctx, err)
	var tried []string
	if r.tokens != nil {
		tried = r.tokens.Since(n0)
	}
	if err == nil {
		if op.Semaphore != "" {
			r.permits.Store(l.Token(), op.Permits)
			op.Key = PermitKey(op.Semaphore, l.Permit())
		}
		op.Token, op.Fence, op.Deadline, op.Shared = l.Token(), l.Fence(), r.h.Since(deadline), l.Shared()
		op.TTL = l.TTL() // the lock's own: the Client's, or a per-call WithTTL's
		op.Session = r.sessionKey(l)
		own, _ := node.SplitToken(op.Token) // as generated, before WithMetadata
		tried = slices.DeleteFunc(tried, func(s string) bool { return s == op.Token || s == own })
	}
	var qe *redlock.QuorumError
	if op.TTL == 0 && errors.As(err, &qe) && qe.Op == "acquire" {
		op.TTL = qe.TTL // a failed call with options: the TTL its attempt set
	}
	op.Tried = tried
	r.h.Add(op)
	r.h.Forget(tried)
	return op
}

// Leader calls Client.Leader and, when it names a leader, records what it
// read (an Observation with no Observer); it returns what Leader returned.
func (r *Recorder) Leader(ctx context.Context, name string, opts ...redlock.Option) (value string, term uint64, err error) {
	start := r.h.Now()
	value, term, err = r.c.Leader(ctx, name, opts...)
	if err == nil {
		r.h.AddObservation(Observation{Client: r.name, Election: name, Value: value, Term: term, Start: start, End: r.h.Now()})
	}
	return value, term, err
}

// Observe calls Client.Observe and returns a channel that delivers what
// its channel delivers, each leader recorded as it is received (an
// Observation of a stream of its own). The channel is closed when
// Observe's is; read it until then, or end ctx.
func (r *Recorder) Observe(ctx context.Context, name string, opts ...redlock.Option) <-chan redlock.Leadership {
	start := r.h.Now()
	id := fmt.Sprintf("observe-%d", r.observers.Add(1))
	in := r.c.Observe(ctx, name, opts...)
	out := make(chan redlock.Leadership)
	go func() {
		defer close(out)
		for lead := range in {
			r.h.AddObservation(Observation{Client: r.name, Observer: id, Election: name, Value: lead.Value, Term: lead.Term, Start: start, End: r.h.Now()})
			select {
			case out <- lead:
			case <-ctx.Done():
			}
		}
	}()
	return out
}
