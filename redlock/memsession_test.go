package redlock

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/internal/plain"
)

// The memPool's model of renewal sessions, after internal/scripts/lib.lua,
// acquire_session.lua and renew_session.lua: a session lock's value is
// token \x1f incarnation \x1f prefix length, held while the session key
// (prefix + "s:" + the token's first 16 bytes) holds that incarnation.

// owner is lib.lua's owner: the token that holds key with value v, "" when
// it is free. p.mu must be held.
func (p *memPool) owner(key, v string) string {
	token, inc, sk, ok := node.ParseSession(key, v)
	if !ok {
		return v
	}
	if s, ok := p.get(sk); !ok || s.val != inc {
		return ""
	}
	return token
}

// names is lib.lua's names: whether v was written for token t.
func names(v, t string) bool { return v == t || strings.HasPrefix(v, t+string(node.Sep)) }

// run answers op as the Pools of package pool do: the session commands by
// the model, the others through the Pool's methods.
func (p *memPool) run(op *node.Op) node.Result {
	switch op.Kind {
	case node.AcquireSession, node.RenewSession, node.Resume, node.Inspect:
	default:
		return plain.Call(context.Background(), p, op)
	}
	if err := p.begin(context.Background()); err != nil {
		return node.Result{Err: err}
	}
	switch op.Kind {
	case node.AcquireSession:
		return node.Result{Int: p.acquireSession(op)}
	case node.Resume:
		return node.Result{Int: p.resume(op)}
	case node.Inspect:
		return node.Result{Str: p.inspect(op)}
	default:
		p.mu.Lock()
		defer p.mu.Unlock()
		s, ok := p.get(op.Key)
		if !ok || s.val != op.Token {
			return node.Result{}
		}
		p.keys[op.Key] = memEntry{val: s.val, exp: later(s.exp, time.Now().Add(op.TTL))}
		return node.Result{Int: 1}
	}
}

func (p *memPool) acquireSession(op *node.Op) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	o := ""
	if e, ok := p.get(op.Key); ok {
		o = p.owner(op.Key, e.val)
	}
	if o != "" && o != op.Token {
		return 0
	}
	now := time.Now()
	s, ok := p.get(op.Session)
	if ok {
		p.keys[op.Session] = memEntry{val: s.val, exp: later(s.exp, now.Add(op.TTL))}
	} else {
		p.fences[op.Seq]++
		s = memEntry{val: strconv.FormatUint(p.fences[op.Seq], 10), exp: now.Add(op.TTL)}
		p.keys[op.Session] = s
	}
	if o == "" {
		v := op.Token + string(node.Sep) + s.val + string(node.Sep) + strconv.Itoa(op.PrefixLen)
		p.keys[op.Key] = memEntry{val: v, exp: now.Add(op.KeyTTL)}
	}
	inc, _ := strconv.ParseInt(s.val, 10, 64)
	return inc
}

// resume is resume.lua: extend the key while it holds exactly the token; -1
// for a session lock of the token.
func (p *memPool) resume(op *node.Op) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.get(op.Key)
	switch {
	case ok && e.val == op.Token:
		p.keys[op.Key] = memEntry{val: e.val, exp: later(e.exp, time.Now().Add(op.TTL))}
		return 1
	case ok && names(e.val, op.Token):
		return -1
	}
	return 0
}

// inspect is inspect.lua, with the TTL of the lock key (a session lock's is
// its session key's) and the counter of op.FenceKey.
func (p *memPool) inspect(op *node.Op) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.get(op.Key)
	owner, ttl := "", int64(-2)
	if ok {
		owner = p.owner(op.Key, e.val)
		exp := e.exp
		if _, _, sk, isSession := node.ParseSession(op.Key, e.val); isSession {
			exp = p.keys[sk].exp
		}
		if owner != "" {
			ttl = time.Until(exp).Milliseconds()
		}
	}
	fence := ""
	if f, ok := p.fences[op.FenceKey]; ok {
		fence = strconv.FormatUint(f, 10)
	}
	sep := string(node.Sep)
	return strconv.FormatInt(ttl, 10) + sep + fence + sep + sep + owner
}
