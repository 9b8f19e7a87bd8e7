package pool

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// warmAfter is how long after its server first answered a Pool sets up
// its connections ahead of need: a Pool that lives for less (a command
// line run, a test) does not need them.
const warmAfter = time.Second

// warmer sets up a Pool's connections ahead of need (see warm). Its zero
// value is ready; the Pool's Close stops it (stop) and joins it (wg).
type warmer struct {
	first  atomic.Int64 // UnixNano of the first answered batch; 0 before
	begun  atomic.Bool  // warm was called: later answers need no clock
	wg     sync.WaitGroup
	mu     sync.Mutex
	cancel context.CancelFunc // of the warm-up in progress; nil when none
	done   chan struct{}      // closed when the warm-up has ended; nil before it begins, or after one that set up nothing
	closed bool
}

// ended is a closed channel: a warm-up that will not run has ended.
var ended = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Warm sets up p's connections ahead of need now, as many as its batches
// can use at once, and returns once they are set up (or failed to be), or
// when ctx ends, with ctx's error. A Pool does this on its own once its
// server has answered for a second; Warm is for a process that must not
// pay for set-ups in its first seconds: starved then, it would do them all
// at once as it runs again. Only Pools from Dial, DialURL and DialFailover
// warm up; for another Pool, and once p is closed, Warm returns nil at
// once. A connection that cannot be set up (its server down) is set up by
// the first command that needs it, and a warm-up that set up none is tried
// again as at first; one that ctx cut short goes on until it ends or p is
// closed. Safe for concurrent use.
func Warm(ctx context.Context, p Pool) error {
	rp, ok := p.(*redisPool)
	if !ok {
		return nil
	}
	rp.w.begun.Store(true)
	done := rp.warm()
	select {
	case <-done: // first: an ended ctx does not hide a warm-up that has ended
		return nil
	default:
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// sawAnswer notes that the server answered a batch, and warms the Pool up
// once warmAfter has passed since the first answer.
func (p *redisPool) sawAnswer() {
	if p.w.begun.Load() {
		return
	}
	now := time.Now().UnixNano()
	if p.w.first.CompareAndSwap(0, now) {
		return
	}
	if now-p.w.first.Load() >= int64(warmAfter) {
		p.w.begun.Store(true)
		p.warm()
	}
}

// warm sets up, once, on a goroutine of its own, as many connections as the
// Pool's two queues can use at once (2 × maxExecutors): a batch then rarely
// waits for a set-up, and one that a starved process would otherwise do
// under its round (the second executor of a queue, first needed when
// replies are slow) is done before. It is called once the server has
// answered batches for warmAfter: a server that is down, silent, or refused
// by the restart guard gets no more connections than the batches need; a
// warm-up that set up none (the server went down) is tried again, as at
// first. Only for Pools from Dial and DialFailover (whose client is a
// *redis.Client); nothing after stop. It returns a channel closed when the
// warm-up under way, or done, has ended (at once when there is none).
func (p *redisPool) warm() <-chan struct{} {
	rc, ok := p.c.(*redis.Client)
	if !ok || p.cs == nil {
		return ended
	}
	p.w.mu.Lock()
	defer p.w.mu.Unlock()
	switch {
	case p.w.done != nil:
		return p.w.done
	case p.w.closed:
		return ended
	}
	done := make(chan struct{})
	p.w.done = done
	// No deadline of the context's own: a wall-clock deadline would pass
	// while the process stood still, and go-redis would close the
	// connection. The set-up has its budget (the Dialer's), and the PING
	// the read and write timeouts, which do not count a stand-still
	// (conn); Close cancels it.
	ctx, cancel := context.WithCancel(context.Background())
	p.w.cancel = cancel
	p.w.wg.Go(func() {
		defer close(done)
		defer cancel()
		if setUp(ctx, rc) == 0 { // the server is down: warm up again later
			p.w.mu.Lock()
			p.w.done = nil
			p.w.mu.Unlock()
			p.w.first.Store(0)
			p.w.begun.Store(false)
		}
	})
	return done
}

// setUp sets up 2 × maxExecutors connections of rc, each with a PING held
// until every one has answered (a connection given back early would be
// taken again by the next PING instead of a new one set up), and returns
// how many the server answered: an error reply (an ACL without +ping)
// counts, since its connection is set up; a warm-up of none is tried again.
func setUp(ctx context.Context, rc *redis.Client) int {
	held := make([]*redis.Conn, 2*maxExecutors)
	var ok atomic.Int32
	var wg sync.WaitGroup
	for i := range held {
		held[i] = rc.Conn()
		wg.Go(func() {
			var reply redis.Error
			if err := held[i].Ping(ctx).Err(); err == nil || errors.As(err, &reply) {
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	for _, cn := range held {
		_ = cn.Close() // back to the pool, idle
	}
	return int(ok.Load())
}

// stop ends a warm-up in progress and keeps another from starting; the
// Pool then closes its client, which ends the warm-up's reads, and waits
// for it.
func (w *warmer) stop() {
	w.mu.Lock()
	w.closed = true
	if w.cancel != nil {
		w.cancel()
	}
	w.mu.Unlock()
}
