package pool

import (
	"context"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/internal/node"
)

// shards are the batchers of a Cluster pool's queue, one per shard master:
// each writes its pipelines on that master's own client (from the Cluster
// client's slot map, ClusterClient.MasterForKey), so a batch is one write
// and one read on one connection, as on a standalone master. go-redis'
// Cluster pipeline would split every batch per shard, on a goroutine each,
// and wait for the slowest.
//
// Until the Cluster client has loaded its slot map, commands go through the
// queue's own batcher, whose pipelines the Cluster client routes: routing
// must not wait for I/O in Send. Its executors note when the map is loaded
// (learn); from then on Send routes without I/O.
type shards struct {
	mapped atomic.Bool                                // the slot map is loaded
	m      atomic.Pointer[map[*redis.Client]*batcher] // copied on write, under the owner's mu
}

// shard returns the batcher that writes op on a Cluster pool: that of the
// master of op's first key, or b itself while the slot map is not loaded,
// for a command with no key, and once b is closed.
func (b *batcher) shard(cc *redis.ClusterClient, op *node.Op) *batcher {
	if !b.shards.mapped.Load() {
		return b
	}
	key, ok := firstKey(op)
	if !ok {
		return b
	}
	c, err := cc.MasterForKey(context.Background(), key) // no I/O: the map is loaded
	if err != nil {
		return b
	}
	if m := b.shards.m.Load(); m != nil {
		if s := (*m)[c]; s != nil {
			return s
		}
	}
	return b.addShard(c)
}

// addShard returns the batcher for master c, made if there is none yet; b
// itself once b is closed.
func (b *batcher) addShard(c *redis.Client) *batcher {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return b
	}
	var m map[*redis.Client]*batcher
	if old := b.shards.m.Load(); old != nil {
		if s := (*old)[c]; s != nil {
			return s
		}
		m = maps.Clone(*old)
	} else {
		m = map[*redis.Client]*batcher{}
	}
	s := &batcher{c: c}
	m[c] = s
	b.shards.m.Store(&m)
	return s
}

// all returns the shards' batchers.
func (s *shards) all() []*batcher {
	m := s.m.Load()
	if m == nil {
		return nil
	}
	return slices.Collect(maps.Values(*m))
}

// unmapped reports whether c, a writer's client, is a Cluster client whose
// slot map the queue has not seen loaded yet.
func (s *shards) unmapped(c client) bool {
	_, ok := c.(*redis.ClusterClient)
	return ok && !s.mapped.Load()
}

// learn notes that the Cluster client c has loaded its slot map, when it
// has: a batch it routed has just been written, which loads it (else this
// tries again within ctx's deadline).
func (s *shards) learn(ctx context.Context, c client, key string) {
	if _, err := c.(*redis.ClusterClient).MasterForKey(ctx, key); err == nil {
		s.mapped.Store(true)
	}
}

// firstKey returns the first key of op's command, which go-redis routes it
// by; all the keys of one script share its slot.
func firstKey(op *node.Op) (string, bool) {
	a := op.Args
	if len(a) == 0 {
		return "", false
	}
	var k any
	switch name, _ := a[0].(string); name {
	case "evalsha", "eval": // EVALSHA sha numkeys key...
		if n, ok := a[2].(int); ok && n > 0 && len(a) > 3 {
			k = a[3]
		}
	case "get":
		if len(a) > 1 {
			k = a[1]
		}
	}
	key, ok := k.(string)
	return key, ok
}

// redirected reports a MOVED or ASK reply: the master no longer (or not
// yet) serves the command's slot, and the command did not run.
func redirected(err error) bool {
	return err != nil && (redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "ASK"))
}

// resend sends r's command again through the Cluster client, which follows
// the redirect and reloads its slot map, and returns its result; so the
// shards route the slot anew. When r's deadline has passed it is not sent:
// node.ErrNotSent, as for a command never written (it ran nowhere).
func (w *writer) resend(r request) node.Result {
	if !time.Now().Before(r.deadline) {
		return node.Result{Err: node.ErrNotSent}
	}
	ctx := &deadlineCtx{deadline: r.deadline.Add(r.op.Follow), values: r.op.Values}
	return w.p.run(ctx, *r.op)
}
