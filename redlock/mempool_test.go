package redlock

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorumlock/quorumlock/pool"
)

// memPool is an in-memory Pool whose keys expire on time.Now, so that under
// testing/synctest it runs on virtual time with no network at all.
type memPool struct {
	name string

	mu     sync.Mutex
	keys   map[string]memEntry
	fences map[string]uint64
	err    error         // returned by every lock operation while set
	delay  time.Duration // each call takes this long (honouring ctx)

	extends   atomic.Int64 // Extend calls that ran
	inExtend  atomic.Int64 // Extend calls under way
	maxExtend atomic.Int64 // most Extend calls ever under way at once
}

type memEntry struct {
	val string
	exp time.Time
}

var _ pool.Pool = (*memPool)(nil)

func newMemPools(n int) []*memPool {
	ps := make([]*memPool, n)
	for i := range ps {
		ps[i] = &memPool{name: "mem" + string(rune('0'+i)), keys: map[string]memEntry{}, fences: map[string]uint64{}}
	}
	return ps
}

func asPools(ps []*memPool) []pool.Pool {
	out := make([]pool.Pool, len(ps))
	for i, p := range ps {
		out[i] = p
	}
	return out
}

func (p *memPool) setDelay(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

func (p *memPool) setErr(err error) {
	p.mu.Lock()
	p.err = err
	p.mu.Unlock()
}

// begin waits out the delay and returns the injected error, if any.
func (p *memPool) begin(ctx context.Context) error {
	p.mu.Lock()
	err, delay := p.err, p.delay
	p.mu.Unlock()
	if delay > 0 {
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return err
}

// get returns key's live entry; p.mu must be held.
func (p *memPool) get(key string) (memEntry, bool) {
	e, ok := p.keys[key]
	if ok && !time.Now().Before(e.exp) {
		delete(p.keys, key)
		return memEntry{}, false
	}
	return e, ok
}

func (p *memPool) Name() string { return p.name }

func (p *memPool) Acquire(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	if err := p.begin(ctx); err != nil {
		return false, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if e, ok := p.get(key); ok && p.owner(key, e.val) != "" {
		return false, nil
	}
	p.keys[key] = memEntry{val: token, exp: time.Now().Add(ttl)}
	return true, nil
}

func (p *memPool) AcquireFenced(ctx context.Context, key, fenceKey, token string, ttl time.Duration) (uint64, error) {
	ok, err := p.Acquire(ctx, key, token, ttl)
	if !ok || err != nil {
		return 0, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fences[fenceKey]++
	return p.fences[fenceKey], nil
}

func (p *memPool) RaiseFence(ctx context.Context, key, fenceKey, token string, fence uint64) (bool, error) {
	if err := p.begin(ctx); err != nil {
		return false, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if e, ok := p.get(key); !ok || p.owner(key, e.val) != token {
		return false, nil
	}
	p.fences[fenceKey] = max(p.fences[fenceKey], fence)
	return true, nil
}

func (p *memPool) Extend(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	n := p.inExtend.Add(1)
	defer p.inExtend.Add(-1)
	for m := p.maxExtend.Load(); n > m && !p.maxExtend.CompareAndSwap(m, n); m = p.maxExtend.Load() {
	}
	if err := p.begin(ctx); err != nil {
		return false, err
	}
	p.extends.Add(1)
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.get(key)
	if !ok || !names(e.val, token) {
		return false, nil
	}
	p.keys[key] = memEntry{val: e.val, exp: later(e.exp, time.Now().Add(ttl))}
	return true, nil
}

func (p *memPool) Release(ctx context.Context, key, token string) (bool, error) {
	if err := p.begin(ctx); err != nil {
		return false, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.get(key)
	if !ok || !names(e.val, token) {
		return false, nil
	}
	delete(p.keys, key)
	return p.owner(key, e.val) == token, nil
}

func (p *memPool) Get(ctx context.Context, key string) (string, error) {
	if err := p.begin(ctx); err != nil {
		return "", err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	e, _ := p.get(key)
	return p.owner(key, e.val), nil
}

func (p *memPool) RunID(context.Context) (string, error) { return "run-" + p.name, nil }
func (p *memPool) Close() error                          { return nil }

// holders counts the pools on which key holds token.
func holders(ps []*memPool, key, token string) int {
	n := 0
	for _, p := range ps {
		p.mu.Lock()
		if e, ok := p.get(key); ok && p.owner(key, e.val) == token {
			n++
		}
		p.mu.Unlock()
	}
	return n
}

// recorder is an Observer that keeps every event with its virtual time.
type recorder struct {
	mu     sync.Mutex
	events []recorded
}

type recorded struct {
	kind string
	at   time.Time
	ev   Event
}

func (r *recorder) add(kind string, ev Event) {
	r.mu.Lock()
	r.events = append(r.events, recorded{kind, time.Now(), ev})
	r.mu.Unlock()
}

func (r *recorder) Acquired(ev Event)      { r.add("acquired", ev) }
func (r *recorder) Extended(ev Event)      { r.add("extended", ev) }
func (r *recorder) Contended(ev Event)     { r.add("contended", ev) }
func (r *recorder) AcquireFailed(ev Event) { r.add("acquire-failed", ev) }
func (r *recorder) ExtendFailed(ev Event)  { r.add("extend-failed", ev) }
func (r *recorder) Lost(ev Event)          { r.add("lost", ev) }
func (r *recorder) Released(ev Event)      { r.add("released", ev) }

// all returns a copy of every event so far.
func (r *recorder) all() []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]recorded(nil), r.events...)
}

func (r *recorder) of(kind string) []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []recorded
	for _, e := range r.events {
		if e.kind == kind {
			out = append(out, e)
		}
	}
	return out
}
