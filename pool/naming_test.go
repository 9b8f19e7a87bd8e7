package pool

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestRingNamedByShards: a Ring is named by its shards' addresses, sorted,
// so that the same shards give the same name whatever their shard names,
// and other shards another name.
func TestRingNamedByShards(t *testing.T) {
	name := func(addrs map[string]string) string {
		t.Helper()
		r := redis.NewRing(&redis.RingOptions{Addrs: addrs})
		defer r.Close()
		p, err := New(r)
		if err != nil {
			t.Fatalf("New(ring %v): %v", addrs, err)
		}
		return p.Name()
	}
	a := name(map[string]string{"x": "127.0.0.1:2", "y": "127.0.0.1:1"})
	b := name(map[string]string{"b": "127.0.0.1:1", "a": "127.0.0.1:2"})
	if a != "127.0.0.1:1,127.0.0.1:2" || b != a {
		t.Fatalf("ring names %q and %q, want both \"127.0.0.1:1,127.0.0.1:2\"", a, b)
	}
	if c := name(map[string]string{"x": "127.0.0.1:3"}); c == a {
		t.Fatalf("rings over other shards share the name %q", c)
	}
}

// TestClusterNamedBySortedSeeds: the seed order of a Cluster client does
// not change its Pool's name.
func TestClusterNamedBySortedSeeds(t *testing.T) {
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:2", "127.0.0.1:1"}})
	defer cc.Close()
	p, err := New(cc)
	if err != nil || p.Name() != "127.0.0.1:1,127.0.0.1:2" {
		t.Fatalf("New(cluster) = %v, %v; want the name \"127.0.0.1:1,127.0.0.1:2\"", p, err)
	}
	if got := cc.Options().Addrs; got[0] != "127.0.0.1:2" {
		t.Fatalf("New reordered the client's seed addresses: %v", got)
	}
	nc := redis.NewClusterClient(&redis.ClusterOptions{ClusterSlots: func(ctx context.Context) ([]redis.ClusterSlot, error) { return nil, nil }})
	defer nc.Close()
	if _, err := New(nc); err == nil || !strings.Contains(err.Error(), "WithName") {
		t.Fatalf("New(cluster without seeds) = %v, want advice to use WithName", err)
	}
}

// TestFailoverClientNeedsName: go-redis names every failover client
// "FailoverClient", so New refuses one without WithName and says what to
// do; with WithName, the Pools of several masters have their own names.
func TestFailoverClientNeedsName(t *testing.T) {
	fc := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m1", SentinelAddrs: []string{"127.0.0.1:1"}})
	defer fc.Close()
	_, err := New(fc)
	if err == nil {
		t.Fatal("New(failover client) without a name succeeded")
	}
	for _, want := range []string{"WithName", "DialFailover"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("New(failover client): %q does not mention %s", err, want)
		}
	}
	p, err := New(fc, WithName("sentinel:m1"))
	if err != nil || p.Name() != "sentinel:m1" {
		t.Fatalf("New(failover client, WithName) = %v, %v", p, err)
	}
}

// TestDialFailover: DialFailover names the Pool after the master, sets the
// client up as Dial does without changing the caller's options, installs
// the connection check, and refuses options it cannot lock with.
func TestDialFailover(t *testing.T) {
	opt := &redis.FailoverOptions{MasterName: "orders", SentinelAddrs: []string{"127.0.0.1:1"}, MaxRetries: 5}
	p, err := DialFailover(opt)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.Name() != "sentinel:orders" {
		t.Errorf("name %q, want \"sentinel:orders\"", p.Name())
	}
	got := p.(*redisPool).c.(*redis.Client).Options()
	if !got.ContextTimeoutEnabled || got.MaxRetries != 0 || got.DialerRetries != 1 || got.OnConnect == nil {
		t.Errorf("ContextTimeoutEnabled %v, MaxRetries %d, DialerRetries %d, OnConnect set %v; want true, 0 (no retries), 1, true",
			got.ContextTimeoutEnabled, got.MaxRetries, got.DialerRetries, got.OnConnect != nil)
	}
	if opt.MaxRetries != 5 || opt.ContextTimeoutEnabled || opt.OnConnect != nil {
		t.Error("DialFailover changed the caller's options")
	}
	if q, err := DialFailover(opt, WithName("orders-eu")); err != nil || q.Name() != "orders-eu" {
		t.Errorf("DialFailover with WithName = %v, %v", q, err)
	} else {
		_ = q.Close()
	}
	for _, bad := range []*redis.FailoverOptions{
		nil,
		{SentinelAddrs: []string{"127.0.0.1:1"}},
		{MasterName: "m"},
		{MasterName: "m", SentinelAddrs: []string{"127.0.0.1:1"}, ReplicaOnly: true},
		{MasterName: "m", SentinelAddrs: []string{"127.0.0.1:1"}, RouteRandomly: true},
	} {
		if q, err := DialFailover(bad); err == nil {
			_ = q.Close()
			t.Errorf("DialFailover(%+v) accepted", bad)
		}
	}
}

// TestNewRefusesClusterReadsFromReplicas: a ClusterClient that routes
// reads to replicas is refused (Lock.Held and Client.Locked read with GET);
// one that sends everything to masters is accepted.
func TestNewRefusesClusterReadsFromReplicas(t *testing.T) {
	for _, o := range []redis.ClusterOptions{{ReadOnly: true}, {RouteByLatency: true}, {RouteRandomly: true}, {}} {
		o.Addrs = []string{"127.0.0.1:1"}
		cc := redis.NewClusterClient(&o)
		p, err := New(cc)
		switch reads := o.ReadOnly || o.RouteByLatency || o.RouteRandomly; {
		case reads && (err == nil || !strings.Contains(err.Error(), "replicas")):
			t.Errorf("New(ClusterClient %+v) = %v, want an error about replicas", o, err)
		case !reads && err != nil:
			t.Errorf("New(ClusterClient to masters) = %v", err)
		}
		if p != nil {
			_ = p.Close()
		}
		_ = cc.Close()
	}
}
