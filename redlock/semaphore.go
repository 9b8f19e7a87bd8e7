package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/quorumlock/quorumlock/internal/conf"
	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/internal/quorum"
)

// MaxPermits is the largest number of permits a Semaphore may have: every
// acquire reads each permit's key on every node.
const MaxPermits = 256

// ErrPermitMismatch is matched by the error of a Semaphore's TryAcquire,
// Acquire and Do when a node declares another number of permits for the
// semaphore's name than this Semaphore has: another Client uses the name
// with another count. Nothing was acquired.
var ErrPermitMismatch = errors.New("redlock: the semaphore's number of permits differs between Clients")

// Semaphore is a counting semaphore over the Client's nodes, safe for
// concurrent use: at most Permits holders at once, each holding a permit
// that is a Lock, as tolerant of node failures as a lock. Every Client must
// give a name one count: while nodes declare it (a permit held, or taken or
// extended within a TTL), an acquire with another fails with
// ErrPermitMismatch. Client.Resume and Client.Inspect do not reach permits.
type Semaphore struct {
	c       *Client
	name    string
	permits int
	cfg     *conf.Config
	all     *target       // every permit's key (Acquire waits for a release of any)
	keys    []any         // the count key, then each permit's key
	next    atomic.Uint64 // where this Semaphore's next try starts
}

// Semaphore returns the counting semaphore name with permits permits,
// acquired with opts, without I/O. It returns an error for an empty name,
// permits outside 1 to MaxPermits, an invalid option, WithFencing, Shared,
// or Pools not all of package pool.
func (c *Client) Semaphore(name string, permits int, opts ...Option) (*Semaphore, error) {
	if name == "" {
		return nil, errors.New("redlock: semaphore: the name is empty; name what the permits limit")
	}
	if permits < 1 || permits > MaxPermits {
		return nil, fmt.Errorf("redlock: semaphore %q: %d permits; a semaphore has 1 to %d (MaxPermits)", name, permits, MaxPermits)
	}
	if !c.queued {
		return nil, fmt.Errorf("redlock: semaphore %q: needs every Pool to be of package pool: only a script reads every permit at once on a node", name)
	}
	cfg, err := conf.Apply(c.cfg, len(c.pools), opts)
	if err != nil {
		return nil, err
	}
	if err := checkTag(cfg, name); err != nil {
		return nil, fmt.Errorf("redlock: semaphore %q: %w", name, err)
	}
	if why := refused(cfg, shapePermit, c.handoff); why != "" {
		return nil, fmt.Errorf("redlock: semaphore %q: %s", name, why)
	}
	own := *cfg // renewed by its own extends, never through a session
	own.Permit = true
	s := &Semaphore{c: c, name: name, permits: permits, cfg: &own, keys: make([]any, 1+permits)}
	base := c.redisKey(&own, name)
	s.keys[0] = base + node.CountSuffix
	s.all = &target{key: name, keys: make([]string, permits), rkeys: s.keys[1:], sorted: make([]string, permits)}
	for i := range permits {
		k := node.PermitKey(base, i)
		s.keys[1+i], s.all.keys[i], s.all.sorted[i] = k, k, k
	}
	s.all.rkey = s.all.sorted[0]
	slices.Sort(s.all.sorted)
	s.all.sweep = s.sweep
	s.next.Store(uint64(own.Rnd.Duration(time.Duration(permits))))
	return s, nil
}

// Name returns the semaphore's name.
func (s *Semaphore) Name() string { return s.name }

// Permits returns the semaphore's number of permits.
func (s *Semaphore) Permits() int { return s.permits }

// TryAcquire makes one attempt to take a permit, without waiting for one to
// be free; on success the Lock holds a permit (Lock.Permit) on a quorum of
// nodes until its Deadline. The error matches ErrNotAcquired when every
// permit is taken, too few nodes answered or no validity was left (errors.As
// finds the last round's *QuorumError, Key the semaphore's name), ctx.Err()
// too if ctx ended first, and ErrPermitMismatch when a node declares another
// count; it is ErrClosed once Close has begun.
func (s *Semaphore) TryAcquire(ctx context.Context) (*Lock, error) {
	return s.c.asCall(ctx, s.cfg, s.name, func(cl *call) (*Lock, error) { return s.sweep(ctx, s.cfg, cl) })
}

// Acquire takes a permit like TryAcquire, retrying like Client.Lock, with
// their errors; a release of any permit wakes it. Its waiters do not queue:
// whoever asks first after a release takes the permit.
func (s *Semaphore) Acquire(ctx context.Context) (*Lock, error) {
	return s.c.wait(ctx, s.all, s.cfg)
}

// Do takes a permit (waiting like Acquire), runs fn under it and gives it
// back, as Client.Do does for a lock, with Do's results and Acquire's error.
func (s *Semaphore) Do(ctx context.Context, fn func(ctx context.Context) error) error {
	return s.c.under(ctx, s.name, fn, func() (*Lock, error) {
		auto := *s.cfg
		auto.AutoExtend = true
		return s.c.wait(ctx, s.all, &auto)
	})
}

// sweep takes a free permit with cfg (s's, or a copy): it tries one, and
// then, while the nodes' answers leave some untried permit free on enough
// nodes for a quorum, the one free on most of them.
func (s *Semaphore) sweep(ctx context.Context, cfg *conf.Config, cl *call) (*Lock, error) {
	tried := make([]bool, s.permits)
	slot := int(s.next.Add(1) % uint64(s.permits))
	for n := 1; ; n++ {
		p := &permitTry{sem: s, slot: slot, free: make([]int, s.permits), declared: -1}
		t := single(s.name, s.keys[1+slot].(string))
		t.permit = p
		l, err := s.c.attempt(ctx, t, cfg, nil, cl)
		if p.declared >= 0 {
			return nil, s.mismatch(ctx, l, p)
		}
		if err == nil || !errors.Is(err, ErrNotAcquired) || errors.Is(err, ErrAuth) || ctx.Err() != nil {
			return l, err
		}
		tried[slot] = true
		if slot = p.next(tried, cfg.QuorumOf(len(s.c.pools)), len(s.c.pools)); slot < 0 {
			return nil, fmt.Errorf("redlock: semaphore %q: no permit free on a quorum: %s: %w", s.name, s.triedText(n), err)
		}
	}
}

// triedText says how many of s's permits a sweep that tried n of them
// tried, and why it tried no more.
func (s *Semaphore) triedText(n int) string {
	if n >= s.permits {
		return fmt.Sprintf("all %d permits tried", s.permits)
	}
	return fmt.Sprintf("%d of %d permits tried, the nodes' answers showed the others taken on too many nodes", n, s.permits)
}

// mismatch is the error of an attempt that met another count on a node;
// a permit it took anyway is given back first.
func (s *Semaphore) mismatch(ctx context.Context, l *Lock, p *permitTry) error {
	err := fmt.Errorf("redlock: semaphore %q: this Semaphore has %d permits, but node %d declares %d: every Client must give a name the same count (a count stays declared on a node for a TTL after its last permit was taken or extended there): %w",
		s.name, s.permits, p.node, p.declared, ErrPermitMismatch)
	if l != nil {
		if rerr := l.Release(context.WithoutCancel(ctx)); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}
	return err
}

// permitTry is one attempt at one permit, and what the nodes' answers to it
// said of the others.
type permitTry struct {
	sem      *Semaphore
	slot     int   // the permit tried (0-based)
	free     []int // per permit: the nodes that answered it is free
	answered int   // nodes whose answer is counted in free
	declared int   // the count a node declared, when it differed (-1: none)
	node     int   // that node
}

// saw counts a node's answer.
func (p *permitTry) saw(rep quorum.Reply) {
	switch {
	case rep.Err != nil:
	case rep.Int < 0:
		p.declared, p.node = int(-rep.Int), rep.Node
	default:
		p.answered++
		for i := range min(len(rep.Str), len(p.free)) {
			if rep.Str[i] == '1' {
				p.free[i]++
			}
		}
	}
}

// next returns the untried permit free on most nodes, among those that
// could still be free on a quorum of the n nodes (q), or -1 when none can.
// Ties go to the first after the permit just tried, so that concurrent
// sweeps spread.
func (p *permitTry) next(tried []bool, q, n int) int {
	best, most := -1, -1
	unknown := n - p.answered
	for d := 1; d <= len(tried); d++ {
		i := (p.slot + d) % len(tried)
		if !tried[i] && p.free[i]+unknown >= q && p.free[i] > most {
			best, most = i, p.free[i]
		}
	}
	return best
}
