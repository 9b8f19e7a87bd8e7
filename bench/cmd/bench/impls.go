package main

import (
	"context"
	crand "crypto/rand"
	"encoding/base64"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/go-redsync/redsync/v4"
	rsredis "github.com/go-redsync/redsync/v4/redis"
	rsgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redlock"
)

// ttl is the lock TTL of every implementation.
const ttl = 10 * time.Second

// impl is one lock implementation set up against the servers for one run.
type impl interface {
	session() session // one per worker
	close()
}

// session is one worker's use of an implementation: it holds at most one lock.
type session interface {
	// tryLock makes one attempt; false with a nil error means taken.
	tryLock(ctx context.Context, key string) (bool, error)
	// lock waits for the lock (the implementation's own retry policy).
	lock(ctx context.Context, key string) error
	unlock(ctx context.Context) error
}

// implEntry names an implementation and sets it up against the servers
// (nil for the floors, which runFloor runs).
type implEntry struct {
	name string
	new  func(addrs []string) (impl, error)
}

var impls = []implEntry{
	{"quorumlock", newOurs},
	{"redsync", newRedsync},
	{"raw", newRaw},
	{floorName, nil},       // floor.go: not a lock, runFloor runs it (w16 only)
	{scriptFloorName, nil}, // floor.go: the same, with scripts
}

// ---- quorumlock ----

type ours struct {
	pools []pool.Pool
	c     *redlock.Client
}

func newOurs(addrs []string) (impl, error) {
	o, err := oursOf(len(addrs), func(i int) (pool.Pool, error) {
		return pool.Dial(&redis.Options{Addr: addrs[i], Dialer: connDialer})
	})
	if err != nil {
		return nil, err // not a typed nil impl
	}
	return o, nil
}

// oursOf is quorumlock over the n Pools open makes; on failure what it made
// is closed.
func oursOf(n int, open func(i int) (pool.Pool, error)) (*ours, error) {
	o := &ours{}
	for i := range n {
		p, err := open(i)
		if err != nil {
			o.close()
			return nil, err
		}
		o.pools = append(o.pools, p)
	}
	c, err := redlock.New(o.pools, redlock.WithTTL(ttl))
	if err != nil {
		o.close()
		return nil, err
	}
	o.c = c
	return o, nil
}

func (o *ours) session() session { return &oursSession{c: o.c} }

func (o *ours) close() {
	if o.c != nil {
		_ = o.c.Close()
	}
	for _, p := range o.pools {
		_ = p.Close()
	}
}

type oursSession struct {
	c *redlock.Client
	l *redlock.Lock
}

func (s *oursSession) tryLock(ctx context.Context, key string) (bool, error) {
	l, err := s.c.TryLock(ctx, key)
	if err != nil {
		if notAcquired(err) {
			return false, nil
		}
		return false, err
	}
	s.l = l
	return true, nil
}

// notAcquired reports whether err is a round that did not get the lock:
// taken, or too few nodes answered in time.
func notAcquired(err error) bool {
	var qe *redlock.QuorumError
	return errors.As(err, &qe) && qe.Op == "acquire" && qe.Phase == ""
}

func (s *oursSession) lock(ctx context.Context, key string) error {
	l, err := s.c.Lock(ctx, key)
	if err != nil {
		return err
	}
	s.l = l
	return nil
}

func (s *oursSession) unlock(ctx context.Context) error {
	err := s.l.Release(ctx)
	s.l = nil
	return err
}

// ---- redsync ----

type rs struct {
	clients []*redis.Client
	rs      *redsync.Redsync
}

func newRedsync(addrs []string) (impl, error) {
	r := &rs{}
	var pools []rsredis.Pool
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a, Dialer: connDialer})
		r.clients = append(r.clients, c)
		pools = append(pools, rsgoredis.NewPool(c))
	}
	r.rs = redsync.New(pools...)
	return r, nil
}

func (r *rs) session() session { return &rsSession{rs: r.rs} }

func (r *rs) close() {
	for _, c := range r.clients {
		_ = c.Close()
	}
}

type rsSession struct {
	rs *redsync.Redsync
	m  *redsync.Mutex
}

func (s *rsSession) tryLock(ctx context.Context, key string) (bool, error) {
	m := s.rs.NewMutex(key, redsync.WithExpiry(ttl))
	if err := m.TryLockContext(ctx); err != nil {
		var taken *redsync.ErrTaken
		if errors.Is(err, redsync.ErrFailed) || errors.As(err, &taken) {
			return false, nil
		}
		return false, err
	}
	s.m = m
	return true, nil
}

func (s *rsSession) lock(ctx context.Context, key string) error {
	m := s.rs.NewMutex(key, redsync.WithExpiry(ttl))
	if err := m.LockContext(ctx); err != nil {
		return err
	}
	s.m = m
	return nil
}

func (s *rsSession) unlock(ctx context.Context) error {
	ok, err := s.m.UnlockContext(ctx)
	s.m = nil
	if err == nil && !ok {
		err = errors.New("redsync: unlock not confirmed")
	}
	return err
}

// ---- raw go-redis ----

// raw is the plain round a user could write with go-redis alone: SET NX PX
// on every node in parallel (a goroutine each, waiting for all), the lock won
// with a majority; release with a compare-and-delete script on every node.
type raw struct {
	clients []*redis.Client
}

var rawRelease = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

func newRaw(addrs []string) (impl, error) {
	r := &raw{}
	for _, a := range addrs {
		r.clients = append(r.clients, redis.NewClient(&redis.Options{Addr: a}))
	}
	return r, nil
}

func (r *raw) session() session { return &rawSession{r: r} }

func (r *raw) close() {
	for _, c := range r.clients {
		_ = c.Close()
	}
}

type rawSession struct {
	r          *raw
	key, token string
}

func (s *rawSession) round(fn func(c *redis.Client) bool) int {
	var wg sync.WaitGroup
	var mu sync.Mutex
	n := 0
	for _, c := range s.r.clients {
		wg.Go(func() {
			if fn(c) {
				mu.Lock()
				n++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return n
}

func (s *rawSession) tryLock(ctx context.Context, key string) (bool, error) {
	var b [16]byte
	_, _ = crand.Read(b[:])
	token := base64.StdEncoding.EncodeToString(b[:])
	start := time.Now()
	n := s.round(func(c *redis.Client) bool { ok, _ := c.SetNX(ctx, key, token, ttl).Result(); return ok })
	if n >= len(s.r.clients)/2+1 && time.Since(start) < ttl/2 {
		s.key, s.token = key, token
		return true, nil
	}
	s.round(func(c *redis.Client) bool { return rawRelease.Run(ctx, c, []string{key}, token).Err() == nil })
	return false, nil
}

func (s *rawSession) lock(ctx context.Context, key string) error {
	for {
		ok, err := s.tryLock(ctx, key)
		if ok || err != nil {
			return err
		}
		select { // redsync's default retry delay
		case <-time.After(time.Duration(50+rand.IntN(200)) * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (s *rawSession) unlock(ctx context.Context) error {
	key, token := s.key, s.token
	n := s.round(func(c *redis.Client) bool {
		v, err := rawRelease.Run(ctx, c, []string{key}, token).Int()
		return err == nil && v == 1
	})
	if n < len(s.r.clients)/2+1 {
		return errors.New("raw: unlock not confirmed")
	}
	return nil
}
