package pool

import (
	"context"
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
	once   sync.Once
	wg     sync.WaitGroup
	mu     sync.Mutex
	cancel context.CancelFunc // of the warm-up in progress; nil when none
	closed bool
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
// by the restart guard gets no more connections than the batches need. Only for
// Pools from Dial and DialFailover (whose client is a *redis.Client);
// nothing after stop.
func (p *redisPool) warm() {
	rc, ok := p.c.(*redis.Client)
	if !ok || p.cs == nil {
		return
	}
	p.w.once.Do(func() {
		p.w.mu.Lock()
		defer p.w.mu.Unlock()
		if p.w.closed {
			return
		}
		// No deadline of the context's own: a wall-clock deadline would
		// pass while the process stood still, and go-redis would close
		// the connection. The set-up has its budget (the Dialer's), and
		// the PING the read and write timeouts, which do not count a
		// stand-still (conn); Close cancels it.
		ctx, cancel := context.WithCancel(context.Background())
		p.w.cancel = cancel
		p.w.wg.Go(func() {
			defer cancel()
			// Each PING on a connection of its own, held until every one
			// has answered: a connection given back early would be taken
			// again by the next PING instead of a new one set up.
			held := make([]*redis.Conn, 2*maxExecutors)
			var wg sync.WaitGroup
			for i := range held {
				held[i] = rc.Conn()
				wg.Go(func() { _ = held[i].Ping(ctx).Err() })
			}
			wg.Wait()
			for _, cn := range held {
				_ = cn.Close() // back to the pool, idle
			}
		})
	})
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
