package redlock

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/testlog"
)

// TestCampaignHandsOverWithGrowingTerms: one candidate leads at a time, the
// next leads once it resigns, with a greater term, and Leader reports each
// one's value and Fence.
func TestCampaignHandsOverWithGrowingTerms(t *testing.T) {
	e := newEnv(t, 5)
	c := e.scriptClient(WithTTL(time.Minute))
	ctx := context.Background()
	if _, _, err := c.Leader(ctx, "el"); !errors.Is(err, ErrNoLeader) {
		t.Fatalf("Leader before any campaign: %v, want ErrNoLeader", err)
	}
	a, err := c.Campaign(ctx, "el", "host-a")
	if err != nil {
		t.Fatal(err)
	}
	for range 3 { // other fenced locks move the counter the master's keys share, not the term
		o, err := c.TryLock(ctx, "other", WithFencing(true))
		if err != nil {
			t.Fatal(err)
		}
		landed(t, o)
		_ = o.Release(ctx)
	}
	if v, term, err := c.Leader(ctx, "el"); err != nil || v != "host-a" || term != a.Fence() || term == 0 {
		t.Fatalf("Leader = %q, %d, %v; want host-a, %d", v, term, err, a.Fence())
	}
	won := make(chan *Lock, 1)
	go func() {
		b, err := c.Campaign(ctx, "el", "host-b")
		if err != nil {
			t.Error(err)
		}
		won <- b
	}()
	select {
	case <-won:
		t.Fatal("a second candidate leads while the first holds")
	case <-time.After(200 * time.Millisecond):
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	b := <-won
	if b == nil {
		return
	}
	if b.Fence() <= a.Fence() {
		t.Fatalf("term %d after term %d", b.Fence(), a.Fence())
	}
	landed(t, b)
	if v, term, err := c.Leader(ctx, "el"); err != nil || v != "host-b" || term != b.Fence() {
		t.Fatalf("Leader = %q, %d, %v; want host-b, %d", v, term, err, b.Fence())
	}
}

// TestObserveSeesEveryLeader: an observer sees the leader it started under
// and each next one in increasing term order, and its channel closes when
// its context ends and when the Client closes.
func TestObserveSeesEveryLeader(t *testing.T) {
	e := newEnv(t, 5)
	c := e.scriptClient(WithTTL(time.Minute), WithRetryBackoff(10*time.Millisecond, 50*time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	first, err := c.Campaign(ctx, "obs", "v0")
	if err != nil {
		t.Fatal(err)
	}
	ch := c.Observe(ctx, "obs")
	late := c.Observe(context.Background(), "obs") // ended by Close
	var last uint64
	for i := range 4 {
		lead := <-ch
		if lead.Term <= last || lead.Value != "v"+string(rune('0'+i)) {
			t.Fatalf("observed %+v after term %d, want v%d with a greater term", lead, last, i)
		}
		last = lead.Term
		if i == 3 {
			break
		}
		if err := first.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if first, err = c.Campaign(ctx, "obs", "v"+string(rune('1'+i))); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	for range ch {
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	for range late {
	}
	if _, ok := <-c.Observe(context.Background(), "obs"); ok {
		t.Fatal("Observe after Close sent a leader")
	}
}

// TestElectionBadInput: refused before any I/O.
func TestElectionBadInput(t *testing.T) {
	e := newEnv(t, 5)
	c := e.scriptClient()
	ctx := context.Background()
	if _, err := c.Campaign(ctx, "", "v"); err == nil {
		t.Error("Campaign with an empty name: no error")
	}
	if _, err := c.Campaign(ctx, "el", strings.Repeat("x", MaxMetadata+1)); err == nil || !strings.Contains(err.Error(), "MaxMetadata") {
		t.Errorf("Campaign with a long value: %v", err)
	}
	if _, _, err := c.Leader(ctx, ""); err == nil {
		t.Error("Leader with an empty name: no error")
	}
	if _, ok := <-c.Observe(ctx, ""); ok {
		t.Error("Observe with an empty name sent a leader")
	}
}

// TestObserveRefusesEmptyName: an empty name is refused as every other call
// refuses it: Watch returns the error, and Observe, whose channel closes at
// once, logs it.
func TestObserveRefusesEmptyName(t *testing.T) {
	e := newEnv(t, 5)
	var buf testlog.Buffer
	c := e.client(WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
	ctx := context.Background()
	_, _, want := c.Leader(ctx, "")
	if ch, err := c.Watch(ctx, ""); err == nil || ch != nil || err.Error() != strings.Replace(want.Error(), "leader", "observe", 1) {
		t.Errorf("Watch with an empty name = %v, %v; want a nil channel and the error Leader gives (%v)", ch, err, want)
	}
	if _, ok := <-c.Observe(ctx, ""); ok {
		t.Error("Observe with an empty name sent a leader")
	}
	if out := buf.String(); !strings.Contains(out, "level=ERROR") || !strings.Contains(out, "empty") {
		t.Errorf("Observe with an empty name logged %q; want the error", out)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Watch(ctx, "el"); !errors.Is(err, ErrClosed) {
		t.Errorf("Watch after Close = %v, want ErrClosed", err)
	}
}

// TestLeaderTermIsTheQuorumsCounter: the leader's token is on four nodes,
// three of which its fence write-back raised to its term, 6, and one where
// its acquire landed late, after earlier failed rounds had raised that
// node's counter to 10. Leader reports 6, the counter a quorum of the
// leader's nodes share (the highest, 10, would be another leader's term to
// come); with one of the three not answering, no quorum agrees, and Leader
// says it cannot tell rather than guess.
func TestLeaderTermIsTheQuorumsCounter(t *testing.T) {
	e := newEnv(t, 5)
	c := e.scriptClient(WithNodeTimeout(200 * time.Millisecond))
	verifyAll(t, c)
	k := rkey("term")
	for i, n := range e.nodes[:4] {
		n.m.Set(k, "leader-token-0001\x1dhost-a")
		n.m.SetTTL(k, time.Minute)
		n.m.Set(k+":fence", []string{"6", "6", "6", "10"}[i])
	}
	e.nodes[4].m.Set(k+":fence", "7")
	v, term, err := c.Leader(context.Background(), "term")
	if err != nil || v != "host-a" || term != 6 {
		t.Fatalf("Leader = %q, %d, %v; want host-a, 6", v, term, err)
	}
	e.nodes[0].m.SetError("ERR down")
	defer e.nodes[0].m.SetError("")
	if _, term, err := c.Leader(context.Background(), "term"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Leader with a node of the quorum down = term %d, %v; want ErrUnavailable", term, err)
	}
}

// TestCampaignWakesWhenLeaderLapses: a leader that died without resigning
// publishes no release; a candidate whose retry delay is 30 s or more
// still takes over soon after the dead leader's key frees on a quorum,
// because it reads the key's TTLs and waits only until then.
func TestCampaignWakesWhenLeaderLapses(t *testing.T) {
	e := newEnv(t, 5)
	c := e.scriptClient(WithRetryBackoff(30*time.Second, time.Minute))
	verifyAll(t, c)
	k := rkey("lapse")
	for _, n := range e.nodes {
		n.m.Set(k, "dead-leader-0001\x1dhost-a")
		n.m.SetTTL(k, 300*time.Millisecond) // miniredis expires keys as its clock is moved
		n.m.Set(k+":fence", "4")
	}
	moved := make(chan struct{})
	defer func() { <-moved }()
	go func() { // the servers' clocks run on
		defer close(moved)
		time.Sleep(2500 * time.Millisecond) // past the quick retries that follow a waiter's subscription
		for _, n := range e.nodes {
			n.m.FastForward(400 * time.Millisecond)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := c.Campaign(ctx, "lapse", "host-b")
	if err != nil {
		t.Fatalf("Campaign after the leader's key lapsed: %v (it waited for its 30 s retry)", err)
	}
	if l.Fence() <= 4 {
		t.Fatalf("term %d after the dead leader's 4", l.Fence())
	}
}
