package redlock

import (
	"context"
	"strings"
	"testing"

	"github.com/quorumlock/quorumlock/internal/conf"
	"github.com/quorumlock/quorumlock/internal/node"
)

// TestHashTag: node.HashTag follows Redis Cluster's rule (the first '{', the next
// '}', and something between them).
func TestHashTag(t *testing.T) {
	for _, tc := range []struct {
		key, tag string
		ok       bool
	}{
		{"p{k}", "k", true},
		{"p{a}b}", "a", true},
		{"p{{k}", "{k", true},
		{"p{}k}", "", false},
		{"p{k", "", false},
		{"pk}", "", false},
		{"{}{k}", "", false},
		{"p}{k}", "k", true},
	} {
		tag, ok := node.HashTag(tc.key)
		if tag != tc.tag || ok != tc.ok {
			t.Errorf("node.HashTag(%q) = %q, %v; want %q, %v", tc.key, tag, ok, tc.tag, tc.ok)
		}
	}
}

// TestKeyBeginningWithBraceRefused: a key that begins with '}' would give
// its Redis key an empty hash tag (prefix{}...}), so that on a Cluster pool
// the lock key and the keys formed from it land in different slots
// (CROSSSLOT). Every call that names a lock refuses it with a plain error
// that says what to do, before any command reaches a node.
func TestKeyBeginningWithBraceRefused(t *testing.T) {
	e := newEnv(t, 3)
	c := e.scriptClient()
	ctx := context.Background()
	before := e.commands()
	const bad = "}k"
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"TryLock", errOf(c.TryLock(ctx, bad))},
		{"TryLock fenced", errOf(c.TryLock(ctx, bad, WithFencing(true)))},
		{"Lock", errOf(c.Lock(ctx, bad))},
		{"Locked", errOf2(c.Locked(ctx, bad))},
		{"Do", c.Do(ctx, bad, func(context.Context) error { return nil })},
		{"TryLockAll", errOf(c.TryLockAll(ctx, []string{"a", bad}))},
		{"Campaign", errOf(c.Campaign(ctx, bad, "me"))},
		{"Leader", func() error { _, _, err := c.Leader(ctx, bad); return err }()},
		{"Semaphore", func() error { _, err := c.Semaphore(bad, 2); return err }()},
		{"Inspect", func() error { _, err := c.Inspect(ctx, bad); return err }()},
	} {
		if tc.err == nil {
			t.Errorf("%s(%q) succeeded", tc.name, bad)
			continue
		}
		if msg := tc.err.Error(); !strings.Contains(msg, "begins with '}'") || !strings.Contains(msg, "redlock: ") {
			t.Errorf("%s(%q): error %q does not say that the key begins with '}'", tc.name, bad, msg)
		}
	}
	if after := e.commands(); after != before {
		t.Errorf("the refused calls sent %d commands to the nodes, want none", after-before)
	}
}

// TestPrefixWithoutTagRefused: a key prefix that closes a hash tag of its
// own leaves every Redis key without one; the error names the prefix.
func TestPrefixWithoutTagRefused(t *testing.T) {
	e := newEnv(t, 3)
	c := e.scriptClient(WithKeyPrefix("app{}"))
	_, err := c.TryLock(context.Background(), "k")
	if err == nil || !strings.Contains(err.Error(), "WithKeyPrefix") {
		t.Fatalf("TryLock under the prefix \"app{}\": %v, want an error about the prefix", err)
	}
}

// TestPrefixThatOpensATagRefused: a key prefix that opens a hash tag it
// does not close ("app{") gives the lock key a tag that runs into the key
// ("{orders"), while the keys formed from the prefix get another (the
// per-slot counter's "{45d"): fenced locks on a Cluster pool failed every
// time with CROSSSLOT. Such prefixes are refused before any I/O; every
// prefix and key accepted forms keys that share the lock key's slot.
func TestPrefixThatOpensATagRefused(t *testing.T) {
	e := newEnv(t, 3)
	ctx := context.Background()
	before := e.commands()
	for _, prefix := range []string{"app{", "a{b:", "x{}{"} {
		_, err := e.scriptClient(WithKeyPrefix(prefix)).TryLock(ctx, "orders", WithFencing(true))
		if err == nil || !strings.Contains(err.Error(), "WithKeyPrefix") {
			t.Errorf("TryLock under the prefix %q: %v, want an error about the prefix", prefix, err)
		}
	}
	if after := e.commands(); after != before {
		t.Errorf("the refused calls sent %d commands to the nodes, want none", after-before)
	}
	for _, prefix := range []string{"", "quorumlock:", "{shop}:", "a}", "x{y}z{", "}{", "app{", "a{b:", "{", "{}", "x{}{"} {
		for _, key := range []string{"orders", "a}b", "{x}", "a{b", "{", "}x"} {
			cfg := &conf.Config{Prefix: prefix}
			if checkTag(cfg, key) != nil {
				continue
			}
			rk := node.RedisKey(prefix, key)
			if s, want := node.Slot(node.FenceKey(prefix, rk, true)), node.Slot(rk); s != want {
				t.Errorf("prefix %q, key %q accepted, but its counter %q is in slot %d, the lock key %q in %d", prefix, key, node.FenceKey(prefix, rk, true), s, rk, want)
			}
		}
	}
}

// TestKeysWithBracesElsewhere: a brace anywhere else keeps the hash tag
// non-empty; such keys lock, fence and release as any other, and every key
// a lock's scripts form (the legacy per-key counter, the line of waiters,
// the per-slot counter of a Cluster pool) shares the lock key's slot.
func TestKeysWithBracesElsewhere(t *testing.T) {
	e := newEnv(t, 3)
	c := e.scriptClient()
	ctx := context.Background()
	for _, key := range []string{"a}b", "{x}", "a{b", "x}", "{", "a}}"} {
		rk := rkey(key)
		slot := node.Slot(rk)
		for _, other := range []string{rk + ":fence", rk + "\x1fq", node.FenceKey(DefaultKeyPrefix, rk, true)} {
			if s := node.Slot(other); s != slot {
				t.Errorf("key %q: %q is in slot %d, the lock key %q in %d", key, other, s, rk, slot)
			}
		}
		l, err := c.TryLock(ctx, key, WithFencing(true))
		if err != nil {
			t.Fatalf("TryLock(%q): %v", key, err)
		}
		if n := e.holders(rk, l.Token()); n < 2 || l.Fence() == 0 {
			t.Errorf("TryLock(%q): token on %d of 3 nodes, fence %d", key, n, l.Fence())
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release(%q): %v", key, err)
		}
		e.waitGone(rk)
	}
}

// commands is the number of commands the env's servers have run.
func (e *env) commands() int {
	n := 0
	for _, nd := range e.nodes {
		n += nd.m.CommandCount()
	}
	return n
}
