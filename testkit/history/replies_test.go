package history_test

import (
	"context"
	"strings"
	"testing"

	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redlock"
	"github.com/quorumlock/quorumlock/testkit/history"
)

// TestRecordReplies: with the nodes' yes-replies recorded, S2 counts a
// quorum for each success, and the tokens the library made are known
// (Tried) without a token generator of the test's.
func TestRecordReplies(t *testing.T) {
	ctx := context.Background()
	h := history.New()
	addrs := memServers(t)
	sent := &history.SentTokens{}
	record := func(i int, p pool.Pool) (pool.Pool, error) { return h.RecordReplies("a", i, p, sent) }
	c := wrappedMemClient(t, addrs, record, redlock.WithFencing(true))
	a := h.Recorder("a", c, history.WithTokens(sent), history.WithSessionKey(sent.SessionKey))
	b := h.Recorder("b", memClient(t, addrs))

	l, err := a.TryLock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Extend(ctx, l, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := b.TryLock(ctx, "k"); err == nil {
		t.Fatal("b took a held key")
	}
	if _, err := a.Release(ctx, l); err != nil {
		t.Fatal(err)
	}
	if sent.Count() != 1 || sent.Since(0)[0] != l.Token() || sent.SessionKey(l) != "" {
		t.Fatalf("sent tokens: %d %v, session key %q", sent.Count(), sent.Since(0), sent.SessionKey(l))
	}
	// a's acquire and extend are each backed by a recorded quorum (a
	// success without one is an S2 violation when Replies is set).
	r := history.Check(h, history.Config{Nodes: 5, Fencing: true, Replies: true})
	if r.Total() != 0 || r.Checked[history.S2] != 2 {
		t.Fatalf("report:\n%v", r)
	}
	if _, err := h.RecordReplies("x", 0, fakePool{}, nil); err == nil || !strings.Contains(err.Error(), "queue") {
		t.Fatalf("RecordReplies of a Pool that does not queue: %v", err)
	}
}

// fakePool is a Pool that is not package pool's.
type fakePool struct{ pool.Pool }
