package pool

import (
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/node"
)

// TestSendExtendMany: one command renews many keys: each only while it holds
// its token, never shortening a TTL, never creating a key; one result per
// key, also after the server lost its script cache.
func TestSendExtendMany(t *testing.T) {
	m, rdb, p := newPool(t)
	defer p.Close()
	for k, v := range map[string]string{"a": "ta", "b": "other", "c": "tc", "long": "tl"} {
		if err := m.Set(k, v); err != nil {
			t.Fatal(err)
		}
		m.SetTTL(k, time.Second)
	}
	m.SetTTL("long", time.Hour)
	op := func() *node.Op {
		return node.New(node.Op{Kind: node.ExtendMany, TTL: time.Minute,
			Keys: []any{"a", "b", "missing", "c", "long"}, Tokens: []any{"ta", "tb", "tm", "tc", "tl"}})
	}
	for _, flush := range []bool{false, true} {
		if flush {
			if err := rdb.ScriptFlush(t.Context()).Err(); err != nil {
				t.Fatal(err)
			}
		}
		box := newInbox(1)
		p.(node.Sender).Send(op(), time.Now().Add(5*time.Second), box, 0)
		if r := box.wait(t)[0]; r.Err != nil || r.Str != "10011" {
			t.Fatalf("flushed %v: %+v, want \"10011\"", flush, r)
		}
	}
	for k, want := range map[string]time.Duration{"a": time.Minute, "b": time.Second, "c": time.Minute, "long": time.Hour} {
		if got := m.TTL(k); got != want {
			t.Errorf("TTL of %s = %v, want %v", k, got, want)
		}
	}
	if m.Exists("missing") {
		t.Error("a renewal created a key")
	}
}
