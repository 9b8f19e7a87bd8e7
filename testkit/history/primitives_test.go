package history_test

import (
	"context"
	"testing"

	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redlock"
	"github.com/quorumlock/quorumlock/testkit/history"
)

// TestRecordPermitsAndLeaders: a semaphore's permits and an election's
// leaders, recorded through a Recorder with the nodes' yes-replies, check
// clean: each permit under its PermitKey with its semaphore (SEM, S2 from
// the permits' own yes), each leader fenced (S4), and what Leader and
// Observe read matched to its leader (ELE).
func TestRecordPermitsAndLeaders(t *testing.T) {
	ctx := context.Background()
	h := history.New()
	addrs := memServers(t)
	sent := &history.SentTokens{}
	record := func(i int, p pool.Pool) (pool.Pool, error) { return h.RecordReplies("a", i, p, sent) }
	c := wrappedMemClient(t, addrs, record)
	a := h.Recorder("a", c, history.WithTokens(sent), history.WithSessionKey(sent.SessionKey))

	sem, err := c.Semaphore("s", 2)
	if err != nil {
		t.Fatal(err)
	}
	p1, op1, err := a.Permit(ctx, sem, false)
	if err != nil {
		t.Fatal(err)
	}
	p2, op2, err := a.Permit(ctx, sem, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.Permit(ctx, sem, false); err == nil {
		t.Fatal("a third permit of two")
	}
	if op1.Key != history.PermitKey("s", p1.Permit()) || op1.Semaphore != "s" || op1.Permits != 2 || op2.Key == op1.Key {
		t.Fatalf("permits recorded as %+v and %+v", op1, op2)
	}
	if _, err := a.Extend(ctx, p1, 0); err != nil {
		t.Fatal(err)
	}
	if err := a.Section(p2, func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*redlock.Lock{p1, p2} {
		if _, err := a.Release(ctx, p); err != nil {
			t.Fatal(err)
		}
	}

	octx, stop := context.WithCancel(ctx)
	seen := a.Observe(octx, "el")
	l, op, err := a.Campaign(ctx, "el", "v1")
	if err != nil || !op.Election || op.Fence == 0 {
		t.Fatalf("Campaign: %+v, %v", op, err)
	}
	if lead := <-seen; lead.Value != "v1" || lead.Term != l.Fence() {
		t.Fatalf("observed %+v, want v1 at term %d", lead, l.Fence())
	}
	if v, term, err := a.Leader(ctx, "el"); err != nil || v != "v1" || term != l.Fence() {
		t.Fatalf("Leader = %q, %d, %v", v, term, err)
	}
	if _, err := a.Release(ctx, l); err != nil {
		t.Fatal(err)
	}
	stop()
	for range seen {
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}

	r := history.Check(h, history.Config{Nodes: 5, Replies: true})
	if r.Total() != 0 || r.Permits != 2 || r.Leaders != 1 || r.Observed != 2 || r.Matched != 2 || r.Checked[history.S2] != 4 || r.Checked[history.S4] != 0 {
		t.Fatalf("report (want 2 permits, 1 leader, 2 observed and matched, 4 S2 cases, no violation):\n%v", r)
	}
	if r.Checked[history.SEM] != 3 || r.MostHolders["s"] != (history.Crowd{Permits: 2, Most: 2}) {
		t.Fatalf("SEM: %d cases, most holders %v; want 3 (two windows, a section) and 2 of 2", r.Checked[history.SEM], r.MostHolders)
	}
}
