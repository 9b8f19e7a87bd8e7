package history_test

import (
	"context"
	"errors"
	"slices"
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

// TestRecorderSeveralKeys: a lock of several keys is recorded with its
// keys (its acquire, extend, section and release), its nodes' yes-replies
// back its acquire, write-back and extend (S2 with Replies), a lock of one
// of its keys is refused while it is held, and DoAll records a section of
// every key.
func TestRecorderSeveralKeys(t *testing.T) {
	ctx := context.Background()
	h := history.New()
	addrs := memServers(t)
	sent := &history.SentTokens{}
	record := func(i int, p pool.Pool) (pool.Pool, error) { return h.RecordReplies("a", i, p, sent) }
	a := h.Recorder("a", wrappedMemClient(t, addrs, record, redlock.WithFencing(true)), history.WithTokens(sent), history.WithSessionKey(sent.SessionKey))
	log := &history.TokenLog{Prefix: "b"}
	recordB := func(i int, p pool.Pool) (pool.Pool, error) { return h.RecordReplies("b", i, p, nil) }
	b := h.Recorder("b", wrappedMemClient(t, addrs, recordB, redlock.WithFencing(true), redlock.WithTokenGenerator(log.Generate)), history.WithTokens(log))

	l, op, err := a.AcquireAll(ctx, []string{"k", "j"}, 0)
	if err != nil || op.Key != "k" || !slices.Equal(op.Keys, []string{"k", "j"}) || op.Token != l.Token() || op.Fence == 0 {
		t.Fatalf("won acquire of several keys recorded as %+v (err %v)", op, err)
	}
	if sent.Count() != 1 || sent.Since(0)[0] != l.Token() {
		t.Fatalf("sent tokens: %v, want the acquire's", sent.Since(0))
	}
	if op, err := a.Extend(ctx, l, 0); err != nil || !slices.Equal(op.Keys, []string{"k", "j"}) {
		t.Fatalf("extend recorded as %+v (err %v)", op, err)
	}
	if err := a.Section(l, func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	_, op, err = b.Acquire(ctx, "j", 0)
	if !errors.Is(err, redlock.ErrNotAcquired) || len(op.Tried) != 1 || op.Keys != nil {
		t.Fatalf("b's acquire of a key of the held lock: recorded as %+v (err %v)", op, err)
	}
	if _, err := b.TryLockAll(ctx, []string{"i", "j"}); !errors.Is(err, redlock.ErrNotAcquired) {
		t.Fatalf("b's acquire of a set sharing a key with the held lock: %v", err)
	}
	if op, err := a.Release(ctx, l); err != nil || !slices.Equal(op.Keys, []string{"k", "j"}) {
		t.Fatalf("release recorded as %+v (err %v)", op, err)
	}
	if err := b.DoAll(ctx, []string{"i", "j"}, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := b.DoAll(ctx, []string{"i"}, nil); err == nil || !strings.Contains(err.Error(), "DoAll") {
		t.Fatalf("DoAll with a nil fn: %v", err)
	}
	r := history.Check(h, history.Config{Nodes: 5, Fencing: true, Replies: true})
	// S2 checks a's acquire and extend and b's DoAll's acquire against the
	// recorded yes-replies.
	if r.Total() != 0 || r.Acquired != 2 || r.FailedAcquires != 2 || r.Sections != 2 || r.Checked[history.S2] != 3 {
		t.Fatalf("report:\n%v", r)
	}
	// S1 compares the holders of each key in turn: j (a, then b's DoAll).
	if r.Checked[history.S1] != 1 || r.Checked[history.S4] != 1 || r.Checked[history.SEC] != 1 {
		t.Errorf("checked %d S1, %d S4, %d SEC cases, want 1 each (key j):\n%v", r.Checked[history.S1], r.Checked[history.S4], r.Checked[history.SEC], r)
	}
}
