package pool

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/internal/stall"
)

// idleExit is how long a Pool's writer goroutine waits for work before it
// exits (the next Send starts a new one): a Pool from New whose owner never
// calls Close leaves no goroutine behind.
const idleExit = 100 * time.Millisecond

// maxExecutors bounds the batches one queue of a node has in flight at once.
// A batch whose rounds stopped waiting keeps its connection until its replies
// arrive (node.Op.Follow), because only a reply tells whether a command ran;
// the writer then goes on with another executor, on another connection. A
// node that stalls holds at most this many connections; what is queued
// behind them waits, and is never written if its deadline passes first.
const maxExecutors = 2

// batcher coalesces the commands that concurrent rounds send to one node:
// one writer goroutine takes everything queued and hands it to an executor,
// which writes it as one pipeline (one write, one read of all replies);
// what arrives meanwhile goes into the next batch. The writer waits for a
// batch until the earliest deadline among its commands, then leaves it to
// its executor and goes on. Commands of one batch run on the node in the
// order they were sent, but for one case: when the server has lost its
// script cache (restart, SCRIPT FLUSH), the scripts of a batch answer
// NOSCRIPT and run again with EVAL after it, in their order, so the batch's
// plain commands (GET) ran before them. Batches on different executors are
// not ordered. No round depends on either: a lock's later commands wait for
// its acquire's reply (see internal/quorum.Plan.Hold).
type batcher struct {
	mu      sync.Mutex
	queue   []request
	spare   []request // a finished batch's array, reused
	running bool      // a writer goroutine is alive
	closed  bool
	wake    chan struct{} // capacity 1: work was queued, or the batcher closed
	freed   chan struct{} // capacity 1: an executor became idle
	idle    []*executor   // executors waiting for a batch
	execs   int           // executors alive
	wg      sync.WaitGroup
}

type request struct {
	op       *node.Op
	deadline time.Time
	mark     time.Duration // stall.Now() at Send
	rcv      node.Receiver
	tag      int
}

// executor runs batches on a goroutine of its own, one at a time.
type executor struct {
	in   chan []request // capacity 1
	done chan uint64    // capacity 1: the generation of the last batch delivered
	gen  uint64         // the writer's count of batches handed to it
	w    writer
}

var _ node.Sender = (*redisPool)(nil)

// Send queues op for this node (see node.Sender). It is safe for concurrent
// use; after Close it delivers redis.ErrClosed at once. Background ops go to
// a queue (and writer) of their own: their long deadlines must not hold up
// the rounds' commands behind a node that does not answer.
func (p *redisPool) Send(op *node.Op, deadline time.Time, rcv node.Receiver, tag int) {
	b := &p.b
	if op.Background {
		b = &p.bg
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		rcv.Deliver(tag, node.Result{Err: redis.ErrClosed})
		return
	}
	b.queue = append(b.queue, request{op: op, deadline: deadline, mark: stall.Now(), rcv: rcv, tag: tag})
	if b.wake == nil {
		b.wake, b.freed = make(chan struct{}, 1), make(chan struct{}, 1)
	}
	start := !b.running
	b.running = true
	if start {
		b.wg.Go(func() { p.write(b) })
	}
	b.mu.Unlock()
	if !start {
		signal(b.wake)
	}
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// stop makes the writer deliver redis.ErrClosed for everything still queued
// and exit, and waits for it and the executors (for a batch in flight, at
// most until its deadline plus its Follow; the Pool closes its client first,
// which ends them at once).
func (b *batcher) stop() {
	b.mu.Lock()
	b.closed = true
	wake := b.wake
	b.mu.Unlock()
	if wake != nil {
		signal(wake)
	}
	b.wg.Wait()
}

// write is the writer goroutine: it hands batches to executors until the
// queue stays empty for idleExit or the Pool is closed.
func (p *redisPool) write(b *batcher) {
	var t timer
	defer t.stop()
	for {
		batch, ok := b.take(&t)
		if !ok {
			return
		}
		ex := b.executor(p)
		if ex == nil { // closed meanwhile
			deliverAll(batch, redis.ErrClosed)
			continue
		}
		ex.gen++
		ex.in <- batch
		wait := batch[0].deadline
		for _, r := range batch[1:] {
			if r.deadline.Before(wait) {
				wait = r.deadline
			}
		}
		t.set(time.Until(wait))
	await:
		for {
			select {
			case g := <-ex.done:
				if g == ex.gen {
					break await
				}
			case <-t.c():
				break await // the rounds stopped waiting: the executor follows it
			}
		}
	}
}

// take waits for queued work and returns it; false when the writer must
// exit (closed, after delivering redis.ErrClosed for what was queued, or idle
// for idleExit). It stops the idle executors when the writer exits.
func (b *batcher) take(t *timer) ([]request, bool) {
	for {
		b.mu.Lock()
		if b.closed || len(b.queue) > 0 {
			batch := b.queue
			b.queue = b.spare[:0]
			b.spare = nil
			closed := b.closed
			if closed {
				b.exitLocked()
			}
			b.mu.Unlock()
			if !closed {
				return batch, true
			}
			deliverAll(batch, redis.ErrClosed)
			return nil, false
		}
		b.mu.Unlock()
		t.set(idleExit)
		select {
		case <-b.wake:
			continue
		case <-t.c():
		}
		b.mu.Lock()
		if len(b.queue) == 0 && !b.closed {
			b.exitLocked()
			b.mu.Unlock()
			return nil, false
		}
		b.mu.Unlock()
	}
}

// exitLocked ends the writer: no writer runs any more, and the idle
// executors exit; busy ones exit when their batch is done. b.mu must be held.
func (b *batcher) exitLocked() {
	b.running = false
	for _, ex := range b.idle {
		close(ex.in)
	}
	b.execs -= len(b.idle)
	b.idle = nil
}

// executor returns an idle executor, or starts one, or waits for one to
// become idle when maxExecutors are busy; nil once the batcher is closed.
func (b *batcher) executor(p *redisPool) *executor {
	b.mu.Lock()
	for {
		if b.closed {
			b.mu.Unlock()
			return nil
		}
		if n := len(b.idle); n > 0 {
			ex := b.idle[n-1]
			b.idle = b.idle[:n-1]
			b.mu.Unlock()
			return ex
		}
		if b.execs < maxExecutors {
			b.execs++
			b.mu.Unlock()
			ex := &executor{in: make(chan []request, 1), done: make(chan uint64, 1), w: writer{p: p, pipe: p.c.Pipeline(), ctx: deadlineCtx{cs: p.cs}}}
			b.wg.Go(func() { b.execute(ex) })
			return ex
		}
		b.mu.Unlock()
		select {
		case <-b.freed:
		case <-b.wake: // closed, or more work: check again
		}
		b.mu.Lock()
	}
}

// execute is an executor's goroutine: it runs the batches it is handed and
// delivers every result, until the writer that owns it exits.
func (b *batcher) execute(ex *executor) {
	for batch := range ex.in {
		ex.w.run(batch)
		clear(batch) // drop the receivers
		if !b.park(ex, batch) {
			return
		}
	}
}

// park makes ex idle again after a batch and tells the writer; it reports
// false, and ex must exit, when no writer runs any more.
func (b *batcher) park(ex *executor, batch []request) bool {
	b.mu.Lock()
	if b.spare == nil {
		b.spare = batch[:0]
	}
	alive := b.running && !b.closed
	if alive {
		b.idle = append(b.idle, ex)
	} else {
		b.execs--
	}
	gen := ex.gen // the writer set it before handing over the batch
	b.mu.Unlock()
	select { // keep only the latest generation in the channel
	case <-ex.done:
	default:
	}
	ex.done <- gen
	signal(b.freed)
	return alive
}

func deliverAll(batch []request, err error) {
	for _, r := range batch {
		r.rcv.Deliver(r.tag, node.Result{Err: err})
	}
}

// timer is one reusable timer.
type timer struct{ t *time.Timer }

func (t *timer) set(d time.Duration) {
	if t.t == nil {
		t.t = time.NewTimer(d)
		return
	}
	t.t.Stop()
	t.t.Reset(d)
}

func (t *timer) c() <-chan time.Time { return t.t.C }

func (t *timer) stop() {
	if t.t != nil {
		t.t.Stop()
	}
}

// writer holds what one executor reuses from batch to batch.
type writer struct {
	p    *redisPool
	pipe redis.Pipeliner
	ctx  deadlineCtx
	cmds []redis.Cmder
	reqs []request
}

// run writes one batch and delivers every result.
func (w *writer) run(batch []request) {
	deadline := w.take(batch)
	if len(w.reqs) == 0 {
		return
	}
	stall.Hold() // the batch's deadline does not count a stand-still
	defer stall.Done()
	// go-redis bounds the I/O by this deadline (ContextTimeoutEnabled), and
	// its waits for a connection, dials included, by Done: the rounds'
	// deadlines plus the time their commands are followed, so that a reply
	// that comes after a round stopped waiting is still read on the
	// connection it was sent on.
	w.ctx.arm(deadline)
	defer w.ctx.disarm()
	w.ctx.values = w.reqs[0].op.Values
	ctx := context.Context(&w.ctx)
	for _, r := range w.reqs {
		w.cmds = append(w.cmds, w.p.cmd(ctx, r.op))
	}
	if len(w.cmds) == 1 {
		_ = w.p.c.Process(ctx, w.cmds[0])
	} else {
		for _, c := range w.cmds {
			_ = w.pipe.Process(ctx, c)
		}
		_, _ = w.pipe.Exec(ctx)
	}
	if answered(w.cmds) {
		w.p.sawAnswer() // before the replies go out: a caller may close the Pool
	}
	for i, r := range w.reqs {
		res := r.op.Result(w.cmds[i])
		if node.NoScript(res) { // after a restart or SCRIPT FLUSH
			w.ctx.values = r.op.Values // run alone: with its own caller's values
			res = r.op.Eval(ctx, w.p.c)
		}
		r.rcv.Deliver(r.tag, res)
	}
	clear(w.cmds)
	clear(w.reqs)
	w.ctx.values = nil
}

// take keeps in w.reqs the requests of batch that may still be written,
// delivers node.ErrNotSent to the others, and returns the batch's
// deadline: the latest of its requests' deadlines plus their follow time.
func (w *writer) take(batch []request) (deadline time.Time) {
	now := time.Now()
	w.reqs, w.cmds = w.reqs[:0], w.cmds[:0]
	for _, r := range batch {
		if !now.Before(stall.Extend(node.WriteBy(r.op, r.deadline), r.mark)) { // its round waits as long
			r.rcv.Deliver(r.tag, node.Result{Err: node.ErrNotSent})
			continue
		}
		// Moved by what the process stood still while it was queued; arm
		// moves it by what comes after.
		deadline = later(deadline, stall.Extend(r.deadline.Add(r.op.Follow), r.mark))
		w.reqs = append(w.reqs, r)
	}
	return deadline
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// deadlineCtx is a context with a deadline and the values of a caller's
// context (node.Op.Values; the batch's first command's). go-redis turns the
// deadline into the connection's I/O deadline, waits for a connection (a
// dial's included: go-redis dials without the caller's context) until Done,
// and its hooks read the values. The deadline does not count the time the
// process stood still since it was armed (internal/stall): a batch written
// late because the process could not run still gets its wait for the
// replies, on its connection. It is never cancelled: Done is closed, by one
// reusable timer, once that deadline passed during a batch. A writer
// reuses its one deadlineCtx from batch to batch, so a hook may use it only
// until it returns (WithHooks).
type deadlineCtx struct {
	cs       *conns          // the Pool's connections (nil: New's), for the set-up budget
	deadline time.Time       // written by arm only, under mu
	mark     time.Duration   // stall.Now() when armed; written by arm only, under mu
	values   context.Context // nil: none

	mu      sync.Mutex
	done    chan struct{} // closed by expire; a new one after that
	expired bool
	timer   *time.Timer
}

// arm sets the deadline of the next batch and the timer that closes Done
// when it passes.
func (c *deadlineCtx) arm(deadline time.Time) {
	c.mu.Lock()
	if c.done == nil || c.expired {
		c.done, c.expired = make(chan struct{}), false
	}
	c.deadline, c.mark = deadline, stall.Now()
	if c.timer == nil { // under mu: expire, which reads it, waits for it
		c.timer = time.AfterFunc(time.Until(deadline), c.expire)
	} else {
		c.timer.Reset(time.Until(deadline))
	}
	c.mu.Unlock()
}

// disarm stops the timer once the batch is over.
func (c *deadlineCtx) disarm() {
	c.mu.Lock()
	c.timer.Stop()
	c.mu.Unlock()
}

// expire closes Done if the deadline armed last has passed, once moved
// later by what the process stood still since; else it sets the timer
// again for the rest. A timer that fires late, for a batch already over,
// finds a later deadline and leaves the next batch's Done open.
func (c *deadlineCtx) expire() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.expired {
		return
	}
	if rest := time.Until(c.until()); rest > 0 {
		c.timer.Reset(rest)
		return
	}
	c.expired = true
	close(c.done)
}

// Deadline is until's.
func (c *deadlineCtx) Deadline() (time.Time, bool) { return c.until(), true }

// until is the armed deadline moved later by what the process stood still
// since it was armed, or, if later, the end of the set-up budget of the
// Pool's newest connection (which go-redis sets up under this context when
// a batch needs it).
func (c *deadlineCtx) until() time.Time {
	return stall.Extend(later(c.deadline, c.cs.setupEnd()), c.mark)
}

func (c *deadlineCtx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.done
}

func (c *deadlineCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.expired {
		return context.DeadlineExceeded
	}
	return nil
}

func (c *deadlineCtx) Value(key any) any {
	if c.values == nil {
		return nil
	}
	return c.values.Value(key)
}

// answered reports whether the server answered any of cmds (a reply, nil
// included, rather than an error of the connection or the set-up).
func answered(cmds []redis.Cmder) bool {
	for _, c := range cmds {
		if err := c.Err(); err == nil || err == redis.Nil {
			return true
		}
	}
	return false
}
