package pool

import (
	"context"
	"errors"
	"fmt"
	"github.com/quorumlock/quorumlock/internal/scripts"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/internal/node"
)

// inbox is a node.Receiver that keeps every result by tag.
type inbox struct {
	mu  sync.Mutex
	got map[int]node.Result
	all chan struct{} // closed when want results are in
	n   int
}

func newInbox(want int) *inbox {
	return &inbox{got: map[int]node.Result{}, all: make(chan struct{}), n: want}
}

func (b *inbox) Deliver(tag int, r node.Result) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, dup := b.got[tag]; dup {
		panic(fmt.Sprintf("tag %d delivered twice", tag))
	}
	b.got[tag] = r
	if len(b.got) == b.n {
		close(b.all)
	}
}

func (b *inbox) wait(t *testing.T) map[int]node.Result {
	t.Helper()
	select {
	case <-b.all:
	case <-time.After(10 * time.Second):
		t.Fatal("results missing")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.got
}

// TestSendConcurrent: many goroutines send at once; every command gets its
// own answer, and the commands of one goroutine run in the order sent (with
// the scripts loaded: after a script-cache loss, a batch's scripts run again
// with EVAL after its plain commands; see batcher).
func TestSendConcurrent(t *testing.T) {
	_, rdb, p := newPool(t)
	for _, sc := range []*redis.Script{scripts.Acquire, scripts.Release} {
		if err := sc.Load(context.Background(), rdb).Err(); err != nil {
			t.Fatal(err)
		}
	}
	s := p.(node.Sender)
	const senders, each = 16, 20
	box := newInbox(senders * each * 3)
	deadline := time.Now().Add(5 * time.Second)
	var wg sync.WaitGroup
	for g := range senders {
		wg.Go(func() {
			for k := range each {
				key, tok := fmt.Sprintf("k%d-%d", g, k), fmt.Sprintf("t%d-%d", g, k)
				tag := (g*each + k) * 3
				s.Send(node.New(node.Op{Kind: node.Acquire, Key: key, Token: tok, TTL: time.Minute}), deadline, box, tag)
				s.Send(node.New(node.Op{Kind: node.Get, Key: key}), deadline, box, tag+1)
				s.Send(node.New(node.Op{Kind: node.Release, Key: key, Token: tok}), deadline, box, tag+2)
			}
		})
	}
	wg.Wait()
	got := box.wait(t)
	for g := range senders {
		for k := range each {
			tag := (g*each + k) * 3
			acq, get, rel := got[tag], got[tag+1], got[tag+2]
			if acq.Err != nil || acq.Int != 1 || get.Err != nil || get.Str != fmt.Sprintf("t%d-%d", g, k) || rel.Err != nil || rel.Int != 1 {
				t.Fatalf("%d/%d: acquire %+v, get %+v, release %+v", g, k, acq, get, rel)
			}
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestSendOutcomes: taken, foreign token, missing key, fencing and extend,
// as the synchronous methods report them.
func TestSendOutcomes(t *testing.T) {
	m, _, p := newPool(t)
	defer p.Close()
	s := p.(node.Sender)
	deadline := time.Now().Add(5 * time.Second)
	ops := []*node.Op{
		node.New(node.Op{Kind: node.AcquireFenced, Key: "k", FenceKey: "k:fence", Token: "a", TTL: time.Minute}),
		node.New(node.Op{Kind: node.Acquire, Key: "k", Token: "b", TTL: time.Minute}),
		node.New(node.Op{Kind: node.RaiseFence, Key: "k", FenceKey: "k:fence", Token: "a", Fence: 7}),
		node.New(node.Op{Kind: node.Extend, Key: "k", Token: "b", TTL: time.Hour}),
		node.New(node.Op{Kind: node.Extend, Key: "k", Token: "a", TTL: 2 * time.Minute}),
		node.New(node.Op{Kind: node.Release, Key: "k", Token: "b"}),
		node.New(node.Op{Kind: node.Get, Key: "missing"}),
	}
	want := []int64{1, 0, 1, 0, 1, 0, 0}
	for i, op := range ops { // one at a time: each depends on the one before
		box := newInbox(1)
		s.Send(op, deadline, box, i)
		if got := box.wait(t)[i]; got.Err != nil || got.Int != want[i] {
			t.Errorf("op %d: %+v, want Int %d", i, got, want[i])
		}
	}
	if v, _ := m.Get("k:fence"); v != "7" {
		t.Errorf("fence counter %q, want 7", v)
	}
	if m.TTL("k") != 2*time.Minute {
		t.Errorf("TTL %v, want 2m", m.TTL("k"))
	}
}

// TestSendNoScript: after SCRIPT FLUSH the scripts still run (EVAL).
func TestSendNoScript(t *testing.T) {
	m, rdb, p := newPool(t)
	defer p.Close()
	if err := m.Set("k", "tok"); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ScriptFlush(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	box := newInbox(1)
	p.(node.Sender).Send(node.New(node.Op{Kind: node.Release, Key: "k", Token: "tok"}), time.Now().Add(5*time.Second), box, 0)
	if r := box.wait(t)[0]; r.Err != nil || r.Int != 1 || m.Exists("k") {
		t.Fatalf("release after SCRIPT FLUSH: %+v, key exists %v", r, m.Exists("k"))
	}
}

// TestSendDeadlines: a command whose deadline has passed is not written
// (ErrNotSent), unless it is harmless whenever it lands (WriteLate) and
// its Follow has not passed; one to a server that never answers fails by its deadline,
// or, as here, where it waits for its connection's set-up, when the set-up
// budget (DialTimeout) ends.
func TestSendDeadlines(t *testing.T) {
	_, _, p := newPool(t)
	defer p.Close()
	box := newInbox(1)
	p.(node.Sender).Send(node.New(node.Op{Kind: node.Get, Key: "k"}), time.Now().Add(-time.Millisecond), box, 0)
	if r := box.wait(t)[0]; !errors.Is(r.Err, node.ErrNotSent) {
		t.Fatalf("expired command: %+v, want ErrNotSent", r)
	}

	// A command harmless whenever it lands is still written within its
	// Follow: a release queued past its round's deadline runs.
	_, rdb, lp := newPool(t)
	defer lp.Close()
	if err := rdb.Set(context.Background(), "late", "tok", 0).Err(); err != nil {
		t.Fatal(err)
	}
	box = newInbox(1)
	lp.(node.Sender).Send(node.New(node.Op{Kind: node.Release, Key: "late", Token: "tok", Follow: 5 * time.Second, WriteLate: true}), time.Now().Add(-time.Millisecond), box, 0)
	if r := box.wait(t)[0]; r.Err != nil || r.Int != 1 {
		t.Fatalf("release queued past its deadline, within its Follow: %+v, want written and answered 1", r)
	}

	silent, err := Dial(&redis.Options{Addr: newSilentServer(t), DialTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	box = newInbox(1)
	start := time.Now()
	silent.(node.Sender).Send(node.New(node.Op{Kind: node.Get, Key: "k"}), start.Add(100*time.Millisecond), box, 0)
	r := box.wait(t)[0]
	if r.Err == nil || errors.Is(r.Err, node.ErrNotSent) {
		t.Fatalf("silent server: %+v, want a timeout", r)
	}
	if took := time.Since(start); took < 300*time.Millisecond || took > 5*time.Second {
		t.Fatalf("silent server answered after %v, want about its connection's 300ms set-up budget", took)
	}
}

// TestSendAfterClose: a closed Pool answers redis.ErrClosed at once.
func TestSendAfterClose(t *testing.T) {
	_, _, p := newPool(t)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	box := newInbox(1)
	p.(node.Sender).Send(node.New(node.Op{Kind: node.Get, Key: "k"}), time.Now().Add(time.Second), box, 0)
	if r := box.wait(t)[0]; !errors.Is(r.Err, redis.ErrClosed) {
		t.Fatalf("after Close: %+v", r)
	}
}

// TestDialBoundedByDeadline: a node whose connection set-up never ends
// (dropped SYNs, here a Dialer that blocks until the test ends) holds a
// command up only until its deadline, and Close does not wait for the dial
// either: go-redis dials without the command's context and waits for the
// dial until the context's Done, which used to be nil (the second review:
// a 50 ms Get came back after go-redis' 5 s DialTimeout, Close took 4.7 s).
func TestDialBoundedByDeadline(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	dialing := make(chan struct{}, 16)
	p, err := Dial(&redis.Options{Addr: "127.0.0.1:1", DialTimeout: time.Hour,
		Dialer: func(context.Context, string, string) (net.Conn, error) {
			dialing <- struct{}{}
			<-release
			return nil, errors.New("never reached")
		}})
	if err != nil {
		t.Fatal(err)
	}
	box := newInbox(1)
	p.(node.Sender).Send(node.New(node.Op{Kind: node.Get, Key: "k", Follow: 100 * time.Millisecond}), time.Now().Add(50*time.Millisecond), box, 0)
	<-dialing
	select {
	case <-box.all:
		if r := box.got[0]; r.Err == nil {
			t.Fatalf("Get through a dial that never ends: %+v", r)
		}
	case <-time.After(30 * time.Second): // the dial blocks for an hour
		t.Fatal("a command waited for a dial that never ends, past its deadline")
	}
	closed := make(chan error, 1)
	go func() { closed <- p.Close() }()
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("Close waited for a dial that never ends")
	}
}
