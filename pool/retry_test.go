package pool

import (
	"bytes"
	"context"
	"github.com/quorumlock/quorumlock/internal/scripts"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/internal/node"
)

// dropFirstAcquireReply forwards connections to target, but closes the first
// connection that carries an acquire (the token "tok": SET NX before, the
// acquire script now) right after forwarding it, before the reply:
// the command ran, the client sees a broken connection (EOF) and go-redis,
// with its default MaxRetries, sends it again on a new connection.
func dropFirstAcquireReply(t *testing.T, target string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var dropped atomic.Bool
	t.Cleanup(func() {
		if !dropped.Load() {
			t.Error("no acquire was seen: the test did not drop a reply")
		}
	})
	var wg sync.WaitGroup
	t.Cleanup(func() { _ = ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			wg.Go(func() { _, _ = io.Copy(c, up); _ = c.Close() })
			wg.Go(func() {
				buf := make([]byte, 4096)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						_, _ = up.Write(buf[:n])
						if bytes.Contains(buf[:n], []byte("\r\ntok\r\n")) && dropped.CompareAndSwap(false, true) {
							_ = c.Close()                     // before the reply can come back
							time.Sleep(50 * time.Millisecond) // the server runs it
							_ = up.Close()
							return
						}
					}
					if err != nil {
						_ = up.Close()
						return
					}
				}
			})
		}
	})
	return ln.Addr().String()
}

// TestAcquireRetriedByGoRedis (issue 11, defect 9): over a client with
// go-redis' default retries (pool.New keeps the caller's settings), an
// acquire whose first copy set the key and whose reply was lost is sent
// again; the copy must answer yes, not "taken" to its own token, on the
// Pool's method and on the queued path alike. Before, the copy answered
// taken and the key stayed, never rolled back.
func TestAcquireRetriedByGoRedis(t *testing.T) {
	for _, queued := range []bool{false, true} {
		m := miniredis.RunT(t)
		direct := redis.NewClient(&redis.Options{Addr: m.Addr()})
		if err := scripts.Acquire.Load(context.Background(), direct).Err(); err != nil { // so that the dropped command runs
			t.Fatal(err)
		}
		_ = direct.Close()
		rdb := redis.NewClient(&redis.Options{Addr: dropFirstAcquireReply(t, m.Addr())}) // MaxRetries: default (3)
		t.Cleanup(func() { _ = rdb.Close() })
		p, err := New(rdb, WithName("retried"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		var ok bool
		if queued {
			got := make(chan node.Result, 1)
			p.(node.Sender).Send(node.New(node.Op{Kind: node.Acquire, Key: "k", Token: "tok", TTL: time.Minute}), time.Now().Add(5*time.Second), receiver(func(_ int, r node.Result) { got <- r }), 0)
			r := <-got
			ok, err = r.Int == 1, r.Err
		} else {
			ok, err = p.Acquire(context.Background(), "k", "tok", time.Minute)
		}
		if !ok || err != nil {
			t.Fatalf("queued %v: Acquire retried by go-redis = %v, %v; want true (the key holds our token)", queued, ok, err)
		}
		if v, _ := m.Get("k"); v != "tok" {
			t.Fatalf("queued %v: the key holds %q", queued, v)
		}
	}
}

type receiver func(tag int, r node.Result)

func (f receiver) Deliver(tag int, r node.Result) { f(tag, r) }
