package redlock

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/quorumlock/quorumlock/internal/conf"
	"github.com/quorumlock/quorumlock/internal/node"
)

// TryLockAll makes one attempt to acquire keys as one lock, like TryLock: on
// success every key is held on a quorum of nodes until the Deadline, and no
// node holds part of the set; Key is the first key, Keys all. Its errors are
// TryLock's (the *QuorumError's Key is the keys joined by ", "), and before
// any I/O a plain error for an empty list, an empty or repeated key, Shared,
// Pools not all of package pool, or, on a Redis Cluster, keys of two slots
// (give them one hash tag: WithKeyPrefix("{orders}:")).
func (c *Client) TryLockAll(ctx context.Context, keys []string, opts ...Option) (*Lock, error) {
	t, cfg, err := c.several("acquire", keys, opts)
	if err != nil {
		return nil, err
	}
	return c.asCall(ctx, cfg, t.key, func(cl *call) (*Lock, error) { return c.try(ctx, t, cfg, nil, cl) })
}

// LockAll acquires keys as one lock like TryLockAll, retrying like Lock, with
// their errors; a release of any key wakes it. Overlapping sets never
// deadlock, but do not queue: a steady stream of Lock waiters on one of the
// keys can keep LockAll waiting.
func (c *Client) LockAll(ctx context.Context, keys []string, opts ...Option) (*Lock, error) {
	t, cfg, err := c.several("acquire", keys, opts)
	if err != nil {
		return nil, err
	}
	return c.wait(ctx, t, cfg)
}

// DoAll is Do for several keys: it acquires them as one lock, waiting like
// LockAll, and runs fn under it as Do does, with Do's results.
func (c *Client) DoAll(ctx context.Context, keys []string, fn func(ctx context.Context) error, opts ...Option) error {
	name := strings.Join(keys, ", ")
	return c.under(ctx, name, fn, func() (*Lock, error) {
		return c.LockAll(ctx, keys, append([]Option{WithAutoExtend(true)}, opts...)...)
	})
}

// several checks a lock of several keys before any I/O and returns its
// target and configuration.
func (c *Client) several(op string, keys []string, opts []Option) (*target, *conf.Config, error) {
	if len(keys) == 0 {
		return nil, nil, fmt.Errorf("redlock: %s: no keys; name the resources the lock protects", op)
	}
	name := strings.Join(keys, ", ")
	seen := make(map[string]bool, len(keys))
	for i, k := range keys {
		switch {
		case k == "":
			return nil, nil, fmt.Errorf("redlock: %s %q: key %d is empty; name the resource it protects", op, name, i)
		case seen[k]:
			return nil, nil, fmt.Errorf("redlock: %s %q: the key %q is listed twice; list each key once", op, name, k)
		}
		seen[k] = true
	}
	if !c.queued {
		return nil, nil, fmt.Errorf("redlock: %s %q: a lock of several keys needs every Pool to be of package pool: only a script takes several keys at once on a node", op, name)
	}
	cfg, err := conf.Apply(c.cfg, len(c.pools), opts)
	if err != nil {
		return nil, nil, err
	}
	if why := refused(cfg, shapeSeveral, c.handoff); why != "" {
		return nil, nil, fmt.Errorf("redlock: %s %q: %s", op, name, why)
	}
	for _, k := range keys {
		if err := checkTag(cfg, k); err != nil {
			return nil, nil, fmt.Errorf("redlock: %s %q: %w", op, name, err)
		}
	}
	several := *cfg // renewed by its own extends, never through a session
	several.Several = true
	cfg = &several
	t := &target{key: name, keys: slices.Clone(keys), rkeys: make([]any, len(keys)), sorted: make([]string, len(keys))}
	for i, k := range keys {
		t.sorted[i] = c.redisKey(cfg, k)
		t.rkeys[i] = t.sorted[i]
	}
	t.rkey = t.sorted[0]
	slices.Sort(t.sorted)
	if c.slotted {
		if err := oneSlot(t); err != nil {
			return nil, nil, fmt.Errorf("redlock: %s %q: %w", op, name, err)
		}
	}
	return t, cfg, nil
}

// oneSlot checks that t's keys are in one Redis Cluster hash slot: a script
// may only touch keys of one slot (docs/design.md, "Several keys").
func oneSlot(t *target) error {
	first := node.Slot(t.rkey)
	for i, k := range t.rkeys {
		if s := node.Slot(k.(string)); s != first {
			return fmt.Errorf("on a Redis Cluster every key of a lock must hash to one slot, and %q (slot %d) and %q (slot %d) do not: give the keys one hash tag, with WithKeyPrefix(\"{tag}:\") or by starting each key with the same \"{tag}\"", t.keys[0], first, t.keys[i], s)
		}
	}
	return nil
}
