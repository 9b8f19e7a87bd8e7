package history

import (
	"strings"
	"testing"
)

// Shared holders (Op.Shared, Section.Shared): hand-made histories in which
// shared holders of a key overlap each other, and a lock held alone
// overlaps one of them.

// acquireShared records a successful acquire of key as a shared holder: no
// fence, and no fencing write-back among its yes-replies.
func (b *builder) acquireShared(who, key, tok string, start, round, ret int) {
	for _, n := range []int{0, 1, 2} {
		b.h.AddReply(Reply{Client: who, Node: n, Kind: ReplyAcquire, Key: key, Token: tok, Start: ms(round), End: ms(ret - 1)})
	}
	b.h.Add(Op{Client: who, Key: key, Shared: true, Kind: Acquire, Start: ms(start), End: ms(ret), Outcome: OK, Token: tok, TTL: ttl, Deadline: ms(round) + ttl - allow})
}

// releaseShared records a shared holder's release.
func (b *builder) releaseShared(who, key, tok string, start, end int) {
	b.h.Add(Op{Client: who, Key: key, Shared: true, Kind: Release, Start: ms(start), End: ms(end), Outcome: OK, Token: tok})
}

// sectionShared records a shared holder's critical section that read the
// guarded counter (read) and wrote nothing.
func (b *builder) sectionShared(who, key, tok string, read int64, start, end int) {
	b.h.AddSection(Section{Client: who, Key: key, Shared: true, Token: tok, Start: ms(start), End: ms(end), Counted: true, Read: read})
}

// TestSharedOverlap: shared holders of one key may hold it at once, and
// read the guarded counter at once; a lock held alone before and after
// them (fenced, writing the counter) is in order.
func TestSharedOverlap(t *testing.T) {
	b := newBuilder()
	b.acquire("w", "k", "tw", 1, 0, 0, 5)
	b.section("w", "k", "tw", 1, 6, 20, 0)
	b.release("w", "k", "tw", 21, 22)
	b.acquireShared("a", "k", "ta", 25, 25, 30)
	b.acquireShared("b", "k", "tb", 26, 26, 31)
	b.sectionShared("a", "k", "ta", 1, 32, 60)
	b.sectionShared("b", "k", "tb", 1, 33, 61)
	b.releaseShared("a", "k", "ta", 62, 63)
	b.releaseShared("b", "k", "tb", 64, 65)
	b.acquire("v", "k", "tv", 2, 63, 64, 70)
	b.section("v", "k", "tv", 2, 71, 80, 1)
	b.release("v", "k", "tv", 81, 82)
	b.h.SetCounter("k", 2)
	r := check(t, b, cfg)
	want(t, r, nil)
	if r.Checked[S1] != 3 || r.Checked[SEC] != 3 || r.Checked[S4] != 1 {
		t.Errorf("checked %d S1, %d SEC and %d S4 cases, want 3, 3 and 1 (the shared pair is not a case)", r.Checked[S1], r.Checked[SEC], r.Checked[S4])
	}
}

// TestSharedExclusiveOverlap: a lock held alone whose window overlaps a
// shared holder's is reported (S1, LIN, SEC), whichever came first, and
// also when other shared holders came in between.
func TestSharedExclusiveOverlap(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func(b *builder)
	}{
		{"held alone, then shared", func(b *builder) {
			b.acquire("w", "k", "tw", 1, 0, 0, 5)
			b.section("w", "k", "tw", 1, 6, 600, 0)
			b.acquireShared("a", "k", "ta", 400, 400, 500) // inside w's window
			b.sectionShared("a", "k", "ta", 0, 501, 510)
			b.releaseShared("a", "k", "ta", 511, 512)
		}},
		{"shared, then held alone", func(b *builder) {
			b.acquireShared("a", "k", "ta", 0, 0, 5)
			b.sectionShared("a", "k", "ta", 0, 6, 600)
			b.acquireShared("b", "k", "tb", 10, 10, 15) // a second reader: fine
			b.releaseShared("b", "k", "tb", 20, 21)
			b.acquire("w", "k", "tw", 1, 400, 400, 500) // inside a's window
			b.section("w", "k", "tw", 1, 501, 510, 0)
			b.release("w", "k", "tw", 511, 512)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBuilder()
			tc.build(b)
			r := check(t, b, cfg)
			want(t, r, map[Property]int{S1: 1, LIN: 1, SEC: 1})
			if !strings.Contains(r.String(), "shared") {
				t.Errorf("the report does not say which holder was shared:\n%s", r)
			}
		})
	}
}

// TestSharedWrite: a shared holder that writes the guarded counter is no
// reader: LIN reports it.
func TestSharedWrite(t *testing.T) {
	b := newBuilder()
	b.acquireShared("a", "k", "ta", 0, 0, 5)
	b.h.AddSection(Section{Client: "a", Key: "k", Shared: true, Token: "ta", Start: ms(6), End: ms(20), Counted: true, Wrote: true})
	b.releaseShared("a", "k", "ta", 21, 22)
	b.h.SetCounter("k", 1)
	want(t, check(t, b, cfg), map[Property]int{LIN: 1})
}
