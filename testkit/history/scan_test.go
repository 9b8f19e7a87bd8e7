package history_test

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/testkit/history"
)

// TestScan: the end-of-run scan records the lock keys of each node (not the
// counters or the lines), and Check judges them: a failed round's token
// left on a node is an L2 violation.
func TestScan(t *testing.T) {
	ctx := context.Background()
	var nodes []*redis.Client
	for range 2 {
		m := miniredis.RunT(t)
		cl := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { _ = cl.Close() })
		nodes = append(nodes, cl)
	}
	p := "quorumlock:"
	n1 := nodes[1]
	must(t, n1.Set(ctx, p+"{k}", "tried-1", time.Minute).Err())
	must(t, n1.Set(ctx, p+"{k}:fence", "7", 0).Err())
	must(t, n1.Set(ctx, p+"s:seq", "3", 0).Err())
	must(t, n1.ZAdd(ctx, p+"{k}\x1fq", redis.Z{Score: 1, Member: "w"}).Err())

	h := history.New()
	h.Add(history.Op{Client: "a", Key: "k", Kind: history.Acquire, Outcome: history.Failed, TTL: time.Minute,
		Start: 0, End: time.Millisecond, Tried: []string{"tried-1"}})
	if err := h.Scan(ctx, nodes, ""); err != nil {
		t.Fatal(err)
	}
	r := history.Check(h, history.Config{Nodes: 2})
	if r.Count(history.L2) != 1 || r.Total() != 1 {
		t.Fatalf("want one L2 violation (the tried token on node1):\n%v", r)
	}

	nodes[0].Close() // a node that cannot be read is an error naming it
	if err := history.New().Scan(ctx, nodes, ""); err == nil {
		t.Fatal("Scan of a closed client: no error")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
