// Package plain runs the library's commands on a Pool that is not of package
// pool, through the synchronous methods of the pool.Pool interface (Acquire,
// Extend, Release, Get, ...), and returns each result as the wire table
// (internal/node) reads a script's reply. Some commands need scripts: those
// fail here with an error that says so.
package plain

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/pool"
)

// Call runs op through p's synchronous methods and returns its result as
// a script's would be read; a kind a plain Pool cannot run is an error.
func Call(ctx context.Context, p pool.Pool, op *node.Op) node.Result {
	var r node.Result
	switch op.Kind {
	case node.Acquire:
		var ok bool
		if ok, r.Err = p.Acquire(ctx, op.Key, op.Token, op.TTL); ok {
			r.Int = 1
		}
	case node.AcquireFenced:
		var f uint64
		f, r.Err = p.AcquireFenced(ctx, op.Key, op.FenceKey, op.Token, op.TTL)
		r.Int = int64(min(f, 1<<63-1))
	case node.RaiseFence:
		r.Int, r.Err = bit(p.RaiseFence(ctx, op.Key, op.FenceKey, op.Token, op.Fence))
	case node.Extend:
		r.Int, r.Err = bit(p.Extend(ctx, op.Key, op.Token, op.TTL))
	case node.Release:
		r.Int, r.Err = bit(p.Release(ctx, op.Key, op.Token))
	case node.Get, node.Peek:
		r.Str, r.Err = p.Get(ctx, op.Key)
		if op.Kind == node.Peek && r.Err == nil && node.SessionValue(r.Str) {
			r.Err = errors.New("a session lock's value: whether its session lives, only a Pool of package pool can tell")
		}
	case node.ExtendMany:
		return extendEach(ctx, p, op)
	case node.Resume:
		return resumeOn(ctx, p, op)
	case node.Inspect:
		return inspectOn(ctx, p, op)
	default: // session commands: only for Pools that queue (redlock's Client.sessionFor)
		r.Err = fmt.Errorf("redlock: command kind %d needs a Pool of package pool", op.Kind)
	}
	return r
}

// extendEach runs an ExtendMany through a Pool's Extend, key by key. An
// error fails the whole command, as it would a script: an extend of unknown
// fate is no "not held" vote.
func extendEach(ctx context.Context, p pool.Pool, op *node.Op) node.Result {
	bits := make([]byte, len(op.Keys))
	for i := range op.Keys {
		ok, err := p.Extend(ctx, op.Keys[i].(string), op.Tokens[i].(string), op.TTL)
		if err != nil {
			return node.Result{Err: err}
		}
		bits[i] = '0'
		if ok {
			bits[i] = '1'
		}
	}
	return node.Result{Str: string(bits)}
}

func bit(ok bool, err error) (int64, error) {
	if ok {
		return 1, err
	}
	return 0, err
}

// resumeOn runs a Resume through a Pool's Get and Extend: the key must hold
// exactly the token (a plain lock's value) for the Extend to be sent. The
// Extend, which checks the token again on the node, cannot confirm another
// lock: a session lock's value never equals a plain token.
func resumeOn(ctx context.Context, p pool.Pool, op *node.Op) node.Result {
	v, err := p.Get(ctx, op.Key)
	switch {
	case err != nil:
		return node.Result{Err: err}
	case v == op.Token:
		r := node.Result{}
		r.Int, r.Err = bit(p.Extend(ctx, op.Key, op.Token, op.TTL))
		return r
	case strings.HasPrefix(v, op.Token+string(node.Sep)):
		return node.Result{Int: -1}
	}
	return node.Result{}
}

// inspectOn runs an Inspect through a Pool's Get: the key and its two
// fencing counters, without their TTL.
func inspectOn(ctx context.Context, p pool.Pool, op *node.Op) node.Result {
	var vs [3]string
	for i, k := range []string{op.Key, op.FenceKey, node.OwnFence(op.Key)} {
		v, err := p.Get(ctx, k)
		if err != nil {
			return node.Result{Err: err}
		}
		vs[i] = v
	}
	switch {
	case node.SessionValue(vs[0]):
		return node.Result{Err: errors.New("a session lock's value: whether its session lives, only a Pool of package pool can tell")}
	case node.SharedValue(vs[0]):
		return node.Result{Err: errors.New("a key with shared holders: who they are, only a Pool of package pool can tell")}
	case node.HandedValue(vs[0]):
		vs[0] = ""
	}
	for i := 1; i < 3; i++ {
		if strings.Trim(vs[i], "0123456789") != "" {
			vs[i] = "x"
		}
	}
	return node.Result{Str: "-1" + string(node.Sep) + vs[1] + string(node.Sep) + vs[2] + string(node.Sep) + vs[0]}
}
