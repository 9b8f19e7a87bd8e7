package pool

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/internal/node"
)

// wire records what a go-redis client wrote: per write (a command or a
// pipeline), its commands' first keys, the value of ctxKey in its context,
// and the MOVED replies it read.
type wire struct {
	mu     sync.Mutex
	writes [][]string
	values []any
	moved  int
}

type ctxKey struct{}

func (w *wire) DialHook(next redis.DialHook) redis.DialHook { return next }

func (w *wire) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		return w.saw(ctx, []redis.Cmder{cmd}, func() error { return next(ctx, cmd) })
	}
}

func (w *wire) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		return w.saw(ctx, cmds, func() error { return next(ctx, cmds) })
	}
}

func (w *wire) saw(ctx context.Context, cmds []redis.Cmder, next func() error) error {
	var keys []string
	for _, c := range cmds {
		if k, ok := firstKey(&node.Op{Args: c.Args()}); ok {
			keys = append(keys, k)
		}
	}
	w.mu.Lock()
	if len(keys) > 0 { // not the client's own CLUSTER SLOTS and the like
		w.writes, w.values = append(w.writes, keys), append(w.values, ctx.Value(ctxKey{}))
	}
	w.mu.Unlock()
	err := next()
	for _, c := range cmds {
		e := c.Err() // a pipeline's; a command's is next's (Process sets it after the hooks)
		if len(cmds) == 1 {
			e = err
		}
		if redirected(e) {
			w.mu.Lock()
			w.moved++
			w.mu.Unlock()
		}
	}
	return err
}

func (w *wire) snapshot() (writes [][]string, values []any, moved int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([][]string(nil), w.writes...), append([]any(nil), w.values...), w.moved
}

// shardRig is a Pool over a 3-master test cluster whose clients record
// their writes: the Cluster client's own (cluster) and each master's.
type shardRig struct {
	tc      *testCluster
	cc      *redis.ClusterClient
	p       *redisPool
	cluster *wire
	mu      sync.Mutex
	masters map[string]*wire // by address
}

func newShardRig(t *testing.T, tc *testCluster) *shardRig {
	r := &shardRig{tc: tc, cluster: &wire{}, masters: map[string]*wire{}}
	r.cc = tc.client(t, func(cc *redis.ClusterClient) {
		cc.AddHook(r.cluster)
		cc.OnNewNode(func(c *redis.Client) {
			w := &wire{}
			r.mu.Lock()
			r.masters[c.Options().Addr] = w
			r.mu.Unlock()
			c.AddHook(w)
		})
	})
	p, err := New(r.cc)
	if err != nil {
		t.Fatal(err)
	}
	r.p = p.(*redisPool)
	t.Cleanup(func() { _ = p.Close() })
	// The first commands go through the Cluster client, which loads its
	// slot map; then the queue routes per shard.
	box := newInbox(1)
	r.p.Send(node.New(node.Op{Kind: node.Get, Key: "warm-up"}), time.Now().Add(5*time.Second), box, 0)
	if res := box.wait(t)[0]; res.Err != nil {
		t.Fatal(res.Err)
	}
	waitUntil(t, 5*time.Second, "slot map loaded", r.p.b.shards.mapped.Load)
	return r
}

func (r *shardRig) master(addr string) *wire {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.masters[addr]
}

// keysOn returns n keys the cluster serves from server i.
func (r *shardRig) keysOn(t *testing.T, i, n int, prefix string) []string {
	var out []string
	for k := 0; len(out) < n; k++ {
		key := fmt.Sprintf("%s-%d", prefix, k)
		c, err := r.cc.MasterForKey(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		if c.Options().Addr == r.tc.srvs[i].Addr() {
			out = append(out, key)
		}
	}
	return out
}

// TestClusterShards runs the tests of per-shard batching on one Redis
// Cluster of 3 masters (a new cluster takes seconds to agree on its slots),
// each on a Pool of its own, and beside the other tests.
func TestClusterShards(t *testing.T) {
	t.Parallel()
	tc := startClusters(t, 1, 3)[0]
	t.Run("batches", func(t *testing.T) { testShardBatches(t, tc) })
	t.Run("moved", func(t *testing.T) { testShardMoved(t, tc) })
	t.Run("deadlines", func(t *testing.T) { testShardDeadlines(t, tc) })
}

// testShardBatches: once the slot map is loaded, a Cluster pool writes each
// shard's commands on that master's own client, one pipeline per batch
// (the commands queued while the shard's last batch was in flight), with
// the context values of the batch's first command; the Cluster client's
// pipeline is not used, and every command gets its own answer.
func testShardBatches(t *testing.T, tc *testCluster) {
	r := newShardRig(t, tc)
	keys := make([][]string, 3)
	for i := range keys {
		keys[i] = r.keysOn(t, i, 5, "batch")
		if err := tc.srvs[i].Pause(); err != nil { // so the rest queue behind the first
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, s := range tc.srvs {
			_ = s.Resume()
		}
	})
	_, _, movedBefore := r.cluster.snapshot()
	clusterWrites, _, _ := r.cluster.snapshot()
	box := newInbox(15)
	deadline := time.Now().Add(10 * time.Second)
	send := func(i, k int) {
		vals := context.WithValue(context.Background(), ctxKey{}, fmt.Sprint(i, k))
		op := node.New(node.Op{Kind: node.Acquire, Key: keys[i][k], Token: fmt.Sprint("t", i, k), TTL: time.Minute, Values: vals})
		r.p.Send(op, deadline, box, i*5+k)
	}
	for i := range keys {
		send(i, 0)
		waitUntil(t, 5*time.Second, "first command written", func() bool {
			w := r.master(tc.srvs[i].Addr())
			writes, _, _ := w.snapshot()
			return len(writes) > 0 && writes[len(writes)-1][0] == keys[i][0]
		})
	}
	for i := range keys {
		for k := 1; k < 5; k++ {
			send(i, k)
		}
	}
	for _, s := range tc.srvs {
		if err := s.Resume(); err != nil {
			t.Fatal(err)
		}
	}
	got := box.wait(t)
	for tag, res := range got {
		if res.Err != nil || res.Int != 1 {
			t.Errorf("acquire %d = %+v, want 1", tag, res)
		}
	}
	for i := range keys {
		writes, values, _ := r.master(tc.srvs[i].Addr()).snapshot()
		last := writes[len(writes)-2:]
		if fmt.Sprint(last) != fmt.Sprint([][]string{keys[i][:1], keys[i][1:]}) {
			t.Errorf("master %d wrote %v, want %v then one pipeline of %v", i, last, keys[i][:1], keys[i][1:])
		}
		if v := values[len(values)-1]; v != fmt.Sprint(i, 1) {
			t.Errorf("master %d's pipeline carried the values of %v, want those of its first command (%v)", i, v, fmt.Sprint(i, 1))
		}
		if v, err := tc.cs[i].Get(context.Background(), keys[i][3]).Result(); err != nil || v != fmt.Sprint("t", i, 3) {
			t.Errorf("GET %s on master %d = %q, %v", keys[i][3], i, v, err)
		}
	}
	after, _, movedAfter := r.cluster.snapshot()
	if len(after) != len(clusterWrites) || movedAfter != movedBefore {
		t.Errorf("the Cluster client wrote %v, want nothing once routed per shard", after[len(clusterWrites):])
	}
}

// testShardMoved: a slot moved to another master (CLUSTER SETSLOT ... NODE)
// while the client's slot map still names the old one: the old master
// answers MOVED, so the command ran nowhere, and the Pool sends it again
// through the Cluster client, which follows the redirect and reloads its
// map; the shards then route the slot to the new master. A command whose
// deadline passed before it could be sent again is ErrNotSent.
func testShardMoved(t *testing.T, tc *testCluster) {
	r := newShardRig(t, tc)
	ctx := context.Background()
	key := r.keysOn(t, 0, 1, "moved")[0]
	slot, err := tc.cs[0].ClusterKeySlot(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	tc.moveSlot(t, int(slot), 0, 1)
	box := newInbox(1)
	r.p.Send(node.New(node.Op{Kind: node.Acquire, Key: key, Token: "tok", TTL: time.Minute}), time.Now().Add(5*time.Second), box, 0)
	if res := box.wait(t)[0]; res.Err != nil || res.Int != 1 {
		t.Fatalf("acquire after the move = %+v, want 1", res)
	}
	_, _, moved := r.master(tc.srvs[0].Addr()).snapshot()
	if moved == 0 { // the Pool's, and the Cluster client's own before it follows
		t.Fatal("the old master answered no MOVED: the pool routed by a fresh map?")
	}
	if v, err := tc.cs[1].Get(ctx, key).Result(); err != nil || v != "tok" {
		t.Fatalf("GET on the new master = %q, %v", v, err)
	}
	waitUntil(t, 5*time.Second, "slot map reloaded", func() bool {
		c, err := r.cc.MasterForKey(ctx, key)
		return err == nil && c.Options().Addr == tc.srvs[1].Addr()
	})
	box = newInbox(1)
	r.p.Send(node.New(node.Op{Kind: node.Get, Key: key}), time.Now().Add(5*time.Second), box, 0)
	if res := box.wait(t)[0]; res.Err != nil || res.Str != "tok" {
		t.Fatalf("GET through the pool = %+v", res)
	}
	if _, _, now := r.master(tc.srvs[0].Addr()).snapshot(); now != moved {
		t.Fatalf("the old master answered %d MOVED, want still %d: the shards did not route by the new map", now, moved)
	}
	w := writer{p: r.p, shard: true}
	if res := w.resend(request{op: node.New(node.Op{Kind: node.Get, Key: key}), deadline: time.Now()}); !errors.Is(res.Err, node.ErrNotSent) {
		t.Fatalf("a redirected command past its deadline = %v, want ErrNotSent", res.Err)
	}
}

// testShardDeadlines: on a Cluster pool, a shard whose master stalls holds
// up only its own commands: a command written to it fails when its deadline
// passes (it is no ErrNotSent: it may still run), one queued behind it whose
// deadline passes first is ErrNotSent, and the other shards answer
// meanwhile. After Close, Send fails with redis.ErrClosed, and no writer or
// executor goroutine is left.
func testShardDeadlines(t *testing.T, tc *testCluster) {
	r := newShardRig(t, tc)
	k0, k1 := r.keysOn(t, 0, 2, "stall"), r.keysOn(t, 1, 1, "live")
	if err := tc.srvs[0].Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tc.srvs[0].Resume() })
	box := newInbox(3)
	r.p.Send(node.New(node.Op{Kind: node.Get, Key: k0[0]}), time.Now().Add(2*time.Second), box, 0) // the writer waits for it this long
	waitUntil(t, 5*time.Second, "first command written", func() bool {
		writes, _, _ := r.master(tc.srvs[0].Addr()).snapshot()
		return len(writes) > 0 && writes[len(writes)-1][0] == k0[0]
	})
	r.p.Send(node.New(node.Op{Kind: node.Get, Key: k0[1]}), time.Now().Add(10*time.Millisecond), box, 1)
	r.p.Send(node.New(node.Op{Kind: node.Get, Key: k1[0]}), time.Now().Add(5*time.Second), box, 2)
	got := box.wait(t)
	if res := got[0]; res.Err == nil || errors.Is(res.Err, node.ErrNotSent) {
		t.Errorf("written to a stalled master: %v, want a timeout", res.Err)
	}
	if res := got[1]; !errors.Is(res.Err, node.ErrNotSent) {
		t.Errorf("queued past its deadline: %v, want ErrNotSent", res.Err)
	}
	if res := got[2]; res.Err != nil {
		t.Errorf("another shard: %v, want its answer", res.Err)
	}
	if err := r.p.Close(); err != nil {
		t.Fatal(err)
	}
	box = newInbox(1)
	r.p.Send(node.New(node.Op{Kind: node.Get, Key: k1[0]}), time.Now().Add(time.Second), box, 0)
	if res := box.wait(t)[0]; !errors.Is(res.Err, redis.ErrClosed) {
		t.Errorf("Send after Close = %v, want redis.ErrClosed", res.Err)
	}
	if n := alive(&r.p.b) + alive(&r.p.bg); n != 0 {
		t.Errorf("%d writer and executor goroutines left after Close", n)
	}
}

// alive returns how many writer and executor goroutines b and its shards'
// batchers have (a stopped batcher has joined them).
func alive(b *batcher) int {
	n := 0
	for _, s := range append(b.shards.all(), b) {
		s.mu.Lock()
		if s.running {
			n++
		}
		n += s.execs
		s.mu.Unlock()
	}
	return n
}
