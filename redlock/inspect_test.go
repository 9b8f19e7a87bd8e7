package redlock

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"testing"
	"testing/synctest"
	"time"
)

// TestInspectEverySubset inspects a key held by one token on every subset
// of 5 nodes (another token on some others), with every subset failing,
// through the scripts and the synchronous path: the state is held exactly
// when a quorum of working nodes holds one token, free when no token could
// be on a quorum even if every failed node held it, unknown otherwise; each
// node reports its holder or its error.
func TestInspectEverySubset(t *testing.T) {
	e := newEnv(t, 5)
	e.everySubsetOnBothPaths(t, inspectSubset)
}

func inspectSubset(t *testing.T, e *env, c *Client, path string, held, failing int) {
	t.Helper()
	key := fmt.Sprintf("inspect-%s-%d-%d", path, held, failing)
	k := rkey(key)
	other := 0 // nodes holding another token
	for i, n := range e.nodes {
		switch {
		case held&(1<<i) != 0:
			n.m.Set(k, "tok\x1dhost-a")
		case i%2 == 0:
			n.m.Set(k, "other")
			other |= 1 << i
		}
		if failing&(1<<i) != 0 {
			if path == "scripts" || i%2 == 0 {
				n.m.SetError("ERR injected")
			} else {
				n.fault.setErr(errConnRefused)
			}
		}
	}
	in, err := c.Inspect(context.Background(), key)
	for _, n := range e.nodes {
		n.m.SetError("")
		n.fault.setErr(nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	mine, others := bits.OnesCount(uint(held&^failing)), bits.OnesCount(uint(other&^failing))
	best := max(mine, others)
	want, holder := StateUnknown, ""
	switch {
	case best >= 3:
		want, holder = StateHeld, map[bool]string{true: "tok", false: "other"}[mine >= 3]
	case best+bits.OnesCount(uint(failing)) < 3:
		want = StateFree
	}
	if in.State != want || in.Holder != holder || in.Agreed != best || in.Answered != 5-bits.OnesCount(uint(failing)) {
		t.Fatalf("%s: held %05b failing %05b: %+v, want %v holder %q agreed %d", path, held, failing, in, want, holder, best)
	}
	for i, n := range in.Nodes {
		wantTok := map[bool]string{true: "tok", false: ""}[held&(1<<i) != 0]
		if other&(1<<i) != 0 {
			wantTok = "other"
		}
		switch {
		case (failing&(1<<i) != 0) != (n.Err != nil):
			t.Fatalf("%s: held %05b failing %05b: node %d: error %v", path, held, failing, i, n.Err)
		case n.Err == nil && (n.Token != wantTok || n.Token == "tok" && n.Metadata != "host-a"):
			t.Fatalf("%s: node %d: token %q metadata %q, want %q", path, i, n.Token, n.Metadata, wantTok)
		}
	}
}

// TestInspectShowsTheLock: a fenced lock with a description, as Inspect
// shows it through the scripts: its token, description, TTL and fence.
func TestInspectShowsTheLock(t *testing.T) {
	e := newEnv(t, 5)
	c := New2(t, e.scriptPools(), WithTTL(30*time.Second), WithFencing(true))
	ctx := context.Background()
	if _, err := c.TryLock(ctx, "f"); err != nil { // raises the counters
		t.Fatal(err)
	}
	l, err := c.TryLock(ctx, "job", WithMetadata("host-b pid 7"))
	if err != nil {
		t.Fatal(err)
	}
	in, err := c.Inspect(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	own := l.Token()[:len(l.Token())-len("\x1dhost-b pid 7")]
	if in.State != StateHeld || in.Holder != own || in.Metadata != "host-b pid 7" || in.Fence != l.Fence() || in.Fence < 2 || in.RedisKey != rkey("job") {
		t.Fatalf("Inspect: %+v; lock token %q fence %d", in, l.Token(), l.Fence())
	}
	for _, n := range in.Nodes {
		if n.TTL <= 20*time.Second || n.TTL > 30*time.Second || n.Fence != l.Fence() || n.BadFence {
			t.Fatalf("node %s: TTL %v fence %d (bad %v)", n.Node, n.TTL, n.Fence, n.BadFence)
		}
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	e.waitGone(rkey("job")) // Release returns at quorum; the rest follow
	in, err = c.Inspect(ctx, "job")
	if err != nil || in.State != StateFree || in.Holder != "" || in.Nodes[0].TTL != 0 {
		t.Fatalf("Inspect after release: %+v, %v", in, err)
	}
	e.nodes[1].m.Set(DefaultKeyPrefix+"fence", "garbage")
	if in, _ = c.Inspect(ctx, "job"); !in.Nodes[1].BadFence || in.Nodes[0].BadFence {
		t.Fatalf("a counter that is no integer: %+v", in.Nodes)
	}
}

// TestInspectSessionLock: a session lock is held while its session lives,
// with its session key's TTL; once the session is gone, the key is free.
func TestInspectSessionLock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ps, c, _ := sessionEnv(t)
		l, err := c.TryLock(t.Context(), "s")
		if err != nil {
			t.Fatal(err)
		}
		in, err := c.Inspect(t.Context(), "s")
		if err != nil || in.State != StateHeld || in.Holder != l.Token() || in.Nodes[0].TTL <= 0 {
			t.Fatalf("Inspect of a session lock: %+v, %v", in, err)
		}
		for _, p := range ps {
			p.memPool.mu.Lock()
			delete(p.memPool.keys, l.hold.Session().Key())
			p.memPool.mu.Unlock()
		}
		in, err = c.Inspect(t.Context(), "s")
		if err != nil || in.State != StateFree {
			t.Fatalf("Inspect of a session lock whose session is gone: %+v, %v", in, err)
		}
		_ = l.Release(t.Context())
	})
}

// TestInspectBadInputAndClose: an empty key is an error before any I/O; a
// closed Client says so.
func TestInspectBadInputAndClose(t *testing.T) {
	e := newEnv(t, 3)
	c := e.client()
	if _, err := c.Inspect(context.Background(), ""); err == nil {
		t.Fatal("Inspect of an empty key succeeded")
	}
	if calls := e.nodes[0].fault.calls.Load(); calls != 0 {
		t.Fatalf("%d calls", calls)
	}
	_ = c.Close()
	if _, err := c.Inspect(context.Background(), "k"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Inspect after Close: %v", err)
	}
}

// TestInspectWhenCtxEnds: a caller whose context has ended still gets the
// Inspection (every node with its error, the state unknown) and ctx's
// error.
func TestInspectWhenCtxEnds(t *testing.T) {
	e := newEnv(t, 5)
	c := e.client()
	verifyAll(t, c)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	in, err := c.Inspect(ctx, "k")
	if !errors.Is(err, context.Canceled) || in == nil || in.State != StateUnknown || in.Answered != 0 {
		t.Fatalf("Inspect with an ended context: %+v, %v", in, err)
	}
	for _, n := range in.Nodes {
		if n.Err == nil {
			t.Fatalf("node %s answered an ended context", n.Node)
		}
	}
}
