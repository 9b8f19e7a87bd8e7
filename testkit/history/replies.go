package history

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redlock"
)

// RecordReplies wraps p, client's Pool of node n, so that every yes the
// node gives the client to an acquire, a fencing write-back, an extend or
// a session renewal is recorded (AddReply; a shared holder's join and
// extend, and a semaphore permit's, count as its acquire and extend; a lock of several keys is
// recorded under its first key, and its extend counts as a yes only where
// every one of its keys held its token): with Config.Replies set, S2
// then requires a quorum of them before each success returned. It also
// records every command of a waiter of Lock (AddLineCmd: WF) and every
// error reply (AddNodeError: ERR), and counts the answers. With sent
// not nil, the token of every acquire command the client sends is noted
// there too. Give the wrapped Pools to redlock.New. p must be a Pool of
// package pool (one that queues commands, the path the library takes for
// them); for any other RecordReplies returns an error. The wrapper passes
// release notifications through. It is safe for concurrent use.
func (h *History) RecordReplies(client string, n int, p pool.Pool, sent *SentTokens) (pool.Pool, error) {
	if _, ok := p.(node.Sender); !ok {
		return nil, fmt.Errorf("history: RecordReplies: %T does not queue commands like package pool's Pools", p)
	}
	rp := &replyPool{Pool: p, h: h, client: client, node: n, sent: sent}
	if sub, ok := p.(node.Subscriber); ok {
		return subscribedReplyPool{rp, sub}, nil
	}
	return rp, nil
}

// replyPool records yes-replies on both paths the library uses: the queued
// one (Send) and the synchronous methods.
type replyPool struct {
	pool.Pool
	h      *History
	client string
	node   int
	sent   *SentTokens
}

// subscribedReplyPool is a replyPool over a Pool that delivers release
// notifications.
type subscribedReplyPool struct {
	*replyPool
	node.Subscriber
}

var _ node.Sender = (*replyPool)(nil)

// KeepsStallClock forwards node.StallClocked: the recording changes no wait.
func (p *replyPool) KeepsStallClock() bool {
	s, ok := p.Pool.(node.StallClocked)
	return ok && s.KeepsStallClock()
}

func (p *replyPool) record(k ReplyKind, key, token string, start time.Duration) {
	p.h.AddReply(Reply{Client: p.client, Node: p.node, Kind: k, Key: key, Token: token, Start: start, End: p.h.Now()})
}

// recordIf records a yes to a synchronous call that started at start.
func (p *replyPool) recordIf(yes bool, err error, k ReplyKind, key, token string, start time.Duration) {
	if yes && err == nil {
		p.record(k, key, token, start)
	}
}

func (p *replyPool) Acquire(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	start := p.h.Now()
	ok, err := p.Pool.Acquire(ctx, key, token, ttl)
	p.recordIf(ok, err, ReplyAcquire, key, token, start)
	return ok, err
}

func (p *replyPool) AcquireFenced(ctx context.Context, key, fenceKey, token string, ttl time.Duration) (uint64, error) {
	start := p.h.Now()
	n, err := p.Pool.AcquireFenced(ctx, key, fenceKey, token, ttl)
	p.recordIf(n > 0, err, ReplyAcquire, key, token, start)
	return n, err
}

func (p *replyPool) RaiseFence(ctx context.Context, key, fenceKey, token string, f uint64) (bool, error) {
	start := p.h.Now()
	ok, err := p.Pool.RaiseFence(ctx, key, fenceKey, token, f)
	p.recordIf(ok, err, ReplyRaise, key, token, start)
	return ok, err
}

func (p *replyPool) Extend(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	start := p.h.Now()
	ok, err := p.Pool.Extend(ctx, key, token, ttl)
	p.recordIf(ok, err, ReplyExtend, key, token, start)
	return ok, err
}

// Send passes op to the wrapped Pool's queue and records the node's yes
// when it is delivered.
func (p *replyPool) Send(op *node.Op, deadline time.Time, rcv node.Receiver, tag int) {
	if p.sent != nil {
		switch op.Kind {
		case node.Acquire, node.AcquireFenced, node.AcquireSession, node.AcquireAll, node.AcquireShared, node.AcquirePermit:
			p.sent.add(op.Token, op.Session)
		}
	}
	p.Pool.(node.Sender).Send(op, deadline, &replyReceiver{p: p, op: op, start: p.h.Now(), rcv: rcv}, tag)
}

// replyReceiver records a yes to one Send, a waiter's command (WF) and an
// error reply (ERR), then delivers the result.
type replyReceiver struct {
	p     *replyPool
	op    *node.Op
	start time.Duration
	rcv   node.Receiver
}

func (r *replyReceiver) Deliver(tag int, res node.Result) {
	r.p.h.answered(r.p.client, r.p.node, r.op, r.start, res)
	if res.Err == nil {
		switch k := r.op.Kind; {
		case k == node.AcquireFenced && res.Int > 0, k == node.Acquire && res.Int == 1, k == node.AcquireAll && res.Int > 0,
			k == node.AcquireShared && res.Int == 1, // a shared holder's join
			k == node.AcquirePermit && res.Int == 1: // a permit: under its own key
			r.p.record(ReplyAcquire, r.op.Key, r.op.Token, r.start) // a lock of several keys: its first key
		case k == node.ExtendMany:
			r.extendedMany(res.Str)
		case k == node.RaiseFence && res.Int == 1:
			r.p.record(ReplyRaise, r.op.Key, r.op.Token, r.start)
		case (k == node.Extend || k == node.Resume || k == node.ExtendShared || k == node.ExtendPermit) && res.Int == 1: // a resume's yes is an extend's
			r.p.record(ReplyExtend, r.op.Key, r.op.Token, r.start)
		case k == node.AcquireSession && res.Int > 0: // the session's incarnation on the node
			r.p.h.AddReply(Reply{Client: r.p.client, Node: r.p.node, Kind: ReplyAcquire, Key: r.op.Key, Token: r.op.Token,
				Start: r.start, End: r.p.h.Now(), Session: r.op.Session, Inc: res.Int})
		case k == node.RenewSession && res.Int == 1: // Key: the session key; Token: the incarnation
			r.p.record(ReplyRenew, r.op.Key, r.op.Token, r.start)
		}
	}
	r.rcv.Deliver(tag, res)
}

// extendedMany records the yes of an ExtendMany whose reply is bits, one
// '1' per key that held its token: a yes for each token all of whose keys
// held it (a lock of several keys is extended only on the nodes where every
// one of its keys was), under its first key.
func (r *replyReceiver) extendedMany(bits string) {
	if len(bits) != len(r.op.Keys) || len(r.op.Tokens) != len(r.op.Keys) {
		return
	}
	type lock struct {
		key string
		all bool
	}
	var order []string
	locks := map[string]*lock{}
	for i, t := range r.op.Tokens {
		tok, _ := t.(string)
		key, _ := r.op.Keys[i].(string)
		x := locks[tok]
		if x == nil {
			x = &lock{key: key, all: true}
			locks[tok] = x
			order = append(order, tok)
		}
		x.all = x.all && bits[i] == '1'
	}
	for _, tok := range order {
		if locks[tok].all {
			r.p.record(ReplyExtend, locks[tok].key, tok, r.start)
		}
	}
}

// SentTokens notes the tokens of the acquire commands a client sends
// through Pools wrapped by RecordReplies, in the order they are first sent:
// the tokens of a Client that makes its own (the library's random tokens,
// a session's) are known this way. It is a Tokens for WithTokens, and its
// SessionKey is the function for WithSessionKey. Its zero value is ready to
// use; it is safe for concurrent use.
type SentTokens struct {
	mu       sync.Mutex
	order    []string
	sessions map[string]string // token -> session key ("" for a lock without a session)
}

var _ Tokens = (*SentTokens)(nil)

func (s *SentTokens) add(tok, session string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sessions == nil {
		s.sessions = map[string]string{}
	}
	if _, ok := s.sessions[tok]; !ok {
		s.sessions[tok] = session
		s.order = append(s.order, tok)
	}
}

// Count returns how many tokens were sent.
func (s *SentTokens) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.order)
}

// Since returns the tokens sent after the first n, in order.
func (s *SentTokens) Since(n int) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.order[min(n, len(s.order)):])
}

// SessionKey returns the session key of l if it is a session lock (its
// acquire command was sent with one), else "".
func (s *SentTokens) SessionKey(l *redlock.Lock) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sessions[l.Token()]
}
