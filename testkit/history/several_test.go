package history

import (
	"strings"
	"testing"
)

// Locks of several keys (Op.Keys): hand-made histories in which such a
// lock is judged as a holder of each of its keys.

// acquireAll records a successful acquire of keys as one lock (see
// acquire): the nodes' yes-replies name its first key, as RecordReplies
// records them.
func (b *builder) acquireAll(who string, keys []string, tok string, fence uint64, start, round, ret int) {
	b.acquire(who, keys[0], tok, fence, start, round, ret)
	b.h.mu.Lock()
	b.h.ops[len(b.h.ops)-1].Keys = keys
	b.h.mu.Unlock()
}

// releaseAll records the release of a lock of several keys.
func (b *builder) releaseAll(who string, keys []string, tok string, start, end int) {
	b.h.Add(Op{Client: who, Key: keys[0], Keys: keys, Kind: Release, Start: ms(start), End: ms(end), Outcome: OK, Token: tok})
}

// sectionAll records a critical section under a lock of several keys that
// counted none of their counters.
func (b *builder) sectionAll(who string, keys []string, tok string, fence uint64, start, end int) {
	b.h.AddSection(Section{Client: who, Key: keys[0], Keys: keys, Token: tok, Fence: fence, Start: ms(start), End: ms(end)})
}

// TestSeveralKeysOverlap: a lock of several keys overlaps another lock on
// one of its keys, not the first: a lock of that key alone, or another lock
// of several keys that shares only that key. Check must report the overlap
// on that key (S1, LIN; SEC for their critical sections).
func TestSeveralKeysOverlap(t *testing.T) {
	for _, tc := range []struct {
		name  string
		other []string
	}{
		{"a lock of one of its keys", []string{"j"}},
		{"a lock of several keys sharing one", []string{"i", "j"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBuilder()
			b.acquireAll("a", []string{"k", "j"}, "ta", 1, 0, 0, 5)
			b.sectionAll("a", []string{"k", "j"}, "ta", 1, 6, 600)
			// b returns at 500 ms, inside a's window (~990 ms).
			b.acquireAll("b", tc.other, "tb", 2, 400, 400, 500)
			b.sectionAll("b", tc.other, "tb", 2, 501, 510)
			b.releaseAll("b", tc.other, "tb", 511, 512)
			r := check(t, b, cfg)
			want(t, r, map[Property]int{S1: 1, LIN: 1, SEC: 1})
			for _, v := range r.Violations {
				if v.Key != "j" {
					t.Errorf("violation on %q, want on the shared key j: %v", v.Key, v)
				}
			}
			if !strings.Contains(r.String(), "keys k+j") {
				t.Errorf("the report does not name the lock's keys:\n%s", r)
			}
		})
	}
}

// TestSeveralKeysDisjoint: locks of several keys that share no key may be
// held at once, with each other and with locks of other keys; and a lock of
// one of their keys may follow their release.
func TestSeveralKeysDisjoint(t *testing.T) {
	b := newBuilder()
	b.acquireAll("a", []string{"k", "j"}, "ta", 1, 0, 0, 5)
	b.acquireAll("b", []string{"i", "h"}, "tb", 2, 1, 1, 6)
	b.acquire("c", "m", "tc", 3, 2, 2, 7)
	b.sectionAll("a", []string{"k", "j"}, "ta", 1, 8, 90)
	b.sectionAll("b", []string{"i", "h"}, "tb", 2, 8, 90)
	b.h.AddSection(Section{Client: "c", Key: "m", Token: "tc", Fence: 3, Start: ms(8), End: ms(90)})
	b.releaseAll("a", []string{"k", "j"}, "ta", 100, 102)
	b.releaseAll("b", []string{"i", "h"}, "tb", 100, 102)
	b.release("c", "m", "tc", 100, 102)
	// After a's release, d takes j alone and e takes {k, i}.
	b.acquire("d", "j", "td", 4, 95, 99, 103)
	b.acquireAll("e", []string{"k", "i"}, "te", 5, 95, 99, 103)
	b.sectionAll("e", []string{"k", "i"}, "te", 5, 104, 110)
	b.h.AddSection(Section{Client: "d", Key: "j", Token: "td", Fence: 4, Start: ms(104), End: ms(110)})
	r := check(t, b, cfg)
	want(t, r, nil)
	// S1 compares successive holders per key: k, j and i have two each.
	if r.Checked[S1] != 3 || r.Checked[S4] != 3 {
		t.Errorf("checked %d S1 and %d S4 cases, want 3 each (k, j, i)", r.Checked[S1], r.Checked[S4])
	}
}

// TestSeveralKeysFence: a lock of several keys takes its place in the
// fencing order of each of its keys (S4).
func TestSeveralKeysFence(t *testing.T) {
	b := newBuilder()
	b.acquire("a", "j", "ta", 4, 0, 0, 5)
	b.release("a", "j", "ta", 10, 11)
	b.acquireAll("b", []string{"k", "j"}, "tb", 3, 20, 20, 25) // below a's on j
	b.releaseAll("b", []string{"k", "j"}, "tb", 30, 31)
	b.acquire("c", "k", "tc", 9, 40, 40, 45)
	want(t, check(t, b, cfg), map[Property]int{S4: 1})
}

// TestSeveralKeysLeftovers: each key of a released lock of several keys,
// and each key of a failed attempt's round, is judged (L2) — not only the
// first, and not once per token.
func TestSeveralKeysLeftovers(t *testing.T) {
	b := newBuilder()
	b.acquireAll("a", []string{"k", "j"}, "ta", 1, 0, 0, 5)
	b.releaseAll("a", []string{"k", "j"}, "ta", 10, 11)
	b.h.Add(Op{Client: "b", Key: "i", Keys: []string{"i", "h"}, Kind: Acquire, Start: ms(12), End: ms(15), Outcome: Failed, TTL: ttl, Tried: []string{"tb-1"}})
	b.h.AddLeftovers(
		Leftover{Node: 1, Key: "quorumlock:{k}", Token: "ta", PTTL: 800},
		Leftover{Node: 1, Key: "quorumlock:{j}", Token: "ta", PTTL: 800},
		Leftover{Node: 2, Key: "quorumlock:{h}", Token: "tb-1", PTTL: 800},
	)
	r := check(t, b, cfg)
	want(t, r, map[Property]int{L2: 3})

	// A sweep during the run that finds both keys of the released lock on
	// one node reports each.
	c := cfg
	c.Cleanup = ms(300)
	b = newBuilder()
	b.acquireAll("a", []string{"k", "j"}, "ta", 1, 0, 0, 5)
	b.releaseAll("a", []string{"k", "j"}, "ta", 10, 11)
	sweep(b, 400, Leftover{Node: 1, Key: "quorumlock:{k}", Token: "ta", PTTL: 800}, Leftover{Node: 1, Key: "quorumlock:{j}", Token: "ta", PTTL: 800})
	want(t, check(t, b, c), map[Property]int{L2: 2})
}
