package pool

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/internal/scripts"
)

// idleExit is how long a Pool's writer goroutine waits for work before it
// exits (the next Send starts a new one): a Pool from New whose owner never
// calls Close leaves no goroutine behind.
const idleExit = 100 * time.Millisecond

// batcher coalesces the commands that concurrent rounds send to one node:
// one writer goroutine takes everything queued and writes it as one
// pipeline (one write, one read of all replies); what arrives meanwhile goes
// into the next. Commands run on the node in the order they were sent, but
// for one case: when the server has lost its script cache (restart, SCRIPT
// FLUSH), the scripts of a batch answer NOSCRIPT and run again with EVAL
// after it, in their order, so that the plain commands of that batch (SET NX,
// GET) ran before them. No round depends on that order: it never sends a
// second command for one token to a node before the first has answered,
// except a release behind a straggling acquire, and both of those are
// scripts when the acquire is.
type batcher struct {
	mu      sync.Mutex
	queue   []request
	spare   []request // the previous batch's array, reused
	running bool      // a writer goroutine is alive
	closed  bool
	wake    chan struct{} // capacity 1: work was queued
	wg      sync.WaitGroup
}

type request struct {
	op       *node.Op
	deadline time.Time
	rcv      node.Receiver
	tag      int
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
	b.queue = append(b.queue, request{op: op, deadline: deadline, rcv: rcv, tag: tag})
	if b.wake == nil {
		b.wake = make(chan struct{}, 1)
	}
	start := !b.running
	b.running = true
	if start {
		b.wg.Go(func() { p.write(b) })
	}
	b.mu.Unlock()
	if !start {
		select {
		case b.wake <- struct{}{}:
		default:
		}
	}
}

// stop makes the writer deliver redis.ErrClosed for everything still queued
// and exit, and waits for it (for a batch in flight, at most until its
// deadline).
func (b *batcher) stop() {
	b.mu.Lock()
	b.closed = true
	wake := b.wake
	b.mu.Unlock()
	select {
	case wake <- struct{}{}:
	default:
	}
	b.wg.Wait()
}

// write is the writer goroutine: it runs batches until the queue stays empty
// for idleExit or the Pool is closed.
func (p *redisPool) write(b *batcher) {
	var idle *time.Timer
	w := &writer{p: p, pipe: p.c.Pipeline()}
	for {
		b.mu.Lock()
		if b.closed {
			batch := b.queue
			b.queue, b.running = nil, false
			b.mu.Unlock()
			for _, r := range batch {
				r.rcv.Deliver(r.tag, node.Result{Err: redis.ErrClosed})
			}
			return
		}
		if len(b.queue) == 0 {
			b.mu.Unlock()
			if idle == nil {
				idle = time.NewTimer(idleExit)
			} else {
				idle.Reset(idleExit)
			}
			select {
			case <-b.wake:
				continue
			case <-idle.C:
			}
			b.mu.Lock()
			if len(b.queue) == 0 && !b.closed {
				b.running = false
				b.mu.Unlock()
				return
			}
			b.mu.Unlock()
			continue
		}
		batch := b.queue
		b.queue = b.spare[:0]
		b.mu.Unlock()

		w.run(batch)

		clear(batch) // drop the receivers
		b.mu.Lock()
		b.spare = batch[:0]
		b.mu.Unlock()
	}
}

// writer holds what one writer goroutine reuses from batch to batch.
type writer struct {
	p    *redisPool
	pipe redis.Pipeliner
	ctx  deadlineCtx
	cmds []redis.Cmder
	reqs []request
}

// run writes one batch and delivers every result.
func (w *writer) run(batch []request) {
	now := time.Now()
	w.reqs, w.cmds = w.reqs[:0], w.cmds[:0]
	var deadline time.Time
	for _, r := range batch {
		if !now.Before(r.deadline) {
			r.rcv.Deliver(r.tag, node.Result{Err: node.ErrNotSent})
			continue
		}
		deadline = later(deadline, r.deadline)
		w.reqs = append(w.reqs, r)
	}
	if len(w.reqs) == 0 {
		return
	}
	// go-redis bounds the I/O by this deadline (ContextTimeoutEnabled);
	// a reply that comes before it is delivered even when a caller has
	// stopped waiting, so that late replies are still seen.
	w.ctx.deadline = deadline
	ctx := context.Context(&w.ctx)
	for _, r := range w.reqs {
		w.cmds = append(w.cmds, command(ctx, r.op))
	}
	if len(w.cmds) == 1 {
		_ = w.p.c.Process(ctx, w.cmds[0])
	} else {
		for _, c := range w.cmds {
			_ = w.pipe.Process(ctx, c)
		}
		_, _ = w.pipe.Exec(ctx)
	}
	for i, r := range w.reqs {
		res := result(r.op, w.cmds[i])
		if res.Err != nil && redis.HasErrorPrefix(res.Err, "NOSCRIPT") {
			res = w.p.evalFallback(ctx, r.op) // after a restart or SCRIPT FLUSH
		}
		r.rcv.Deliver(r.tag, res)
	}
	clear(w.cmds)
	clear(w.reqs)
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// command is op as a go-redis command.
func command(ctx context.Context, op *node.Op) redis.Cmder {
	switch op.Kind {
	case node.Acquire:
		return redis.NewBoolCmd(ctx, op.Args...)
	case node.Get:
		return redis.NewStringCmd(ctx, op.Args...)
	default:
		return redis.NewIntCmd(ctx, op.Args...)
	}
}

// result reads cmd's outcome as op's Result.
func result(op *node.Op, cmd redis.Cmder) node.Result {
	switch c := cmd.(type) {
	case *redis.BoolCmd:
		ok, err := c.Result()
		if ok {
			return node.Result{Int: 1, Err: err}
		}
		return node.Result{Err: err}
	case *redis.StringCmd:
		s, err := c.Result()
		if errors.Is(err, redis.Nil) {
			err = nil
		}
		return node.Result{Str: s, Err: err}
	case *redis.IntCmd:
		n, err := c.Result()
		if err == nil && op.Kind == node.AcquireFenced && n < 0 {
			err = fmt.Errorf("pool: fencing counter %q is negative (%d): it was changed outside quorumlock", op.FenceKey, n)
		}
		return node.Result{Int: n, Err: err}
	}
	return node.Result{Err: fmt.Errorf("pool: unexpected command %T", cmd)}
}

// evalFallback runs op's script with EVAL, which also loads it.
func (p *redisPool) evalFallback(ctx context.Context, op *node.Op) node.Result {
	var s *redis.Script
	keys := []string{op.Key}
	var args []any
	switch op.Kind {
	case node.AcquireFenced:
		s, keys, args = scripts.AcquireFenced, append(keys, op.FenceKey), []any{op.Token, op.TTL.Milliseconds()}
	case node.RaiseFence:
		s, keys, args = scripts.RaiseFence, append(keys, op.FenceKey), []any{op.Token, op.Fence}
	case node.Extend:
		s, args = scripts.Extend, []any{op.Token, op.TTL.Milliseconds()}
	case node.Release:
		s, args = scripts.Release, []any{op.Token}
	default:
		return node.Result{Err: fmt.Errorf("pool: NOSCRIPT for a command that is not a script")}
	}
	cmd := s.Eval(ctx, p.c, keys, args...)
	n, err := cmd.Int64()
	ic := redis.NewIntCmd(ctx)
	ic.SetVal(n)
	ic.SetErr(err)
	return result(op, ic)
}

// deadlineCtx is a context with a deadline and nothing else: no channel, no
// timer. go-redis turns the deadline into the connection's I/O deadline.
// Done is nil: it is never cancelled, only its deadline passes.
type deadlineCtx struct{ deadline time.Time }

func (c *deadlineCtx) Deadline() (time.Time, bool) { return c.deadline, true }
func (c *deadlineCtx) Done() <-chan struct{}       { return nil }
func (c *deadlineCtx) Err() error                  { return nil }
func (c *deadlineCtx) Value(any) any               { return nil }
