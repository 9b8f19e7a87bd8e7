package redlock

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/pool"
)

func TestZZLeave(t *testing.T) {
	var pools []pool.Pool
	var ms []*miniredis.Miniredis
	for i := range 5 {
		m := miniredis.RunT(t)
		ms = append(ms, m)
		rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
		t.Cleanup(func() { _ = rdb.Close() })
		p, _ := pool.New(rdb, pool.WithName(fmt.Sprintf("node%d", i)))
		pools = append(pools, p)
	}
	c, err := New(pools, WithFencing(true))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	l, err := c.TryLock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Lock(ctx, "k", WithMaxWait(100*time.Millisecond))
	t.Log(err)
	time.Sleep(100 * time.Millisecond)
	for _, m := range ms {
		zs, _ := m.ZMembers(rkey("k") + "\x1fq")
		t.Log(zs)
	}
	_ = l.Release(ctx)
}
