package history

import (
	"strings"
	"testing"
)

// TestSEC: two holders' critical sections of one key that overlap are a
// violation; one holder's sections may overlap each other; sections of
// different keys never conflict.
func TestSEC(t *testing.T) {
	b := newBuilder()
	b.acquire("a", "k", "ta", 1, 0, 0, 5)
	b.release("a", "k", "ta", 300, 301)
	b.acquire("b", "k", "tb", 2, 302, 302, 305)
	b.release("b", "k", "tb", 600, 601)
	b.h.AddSection(Section{Client: "a", Key: "k", Token: "ta", Start: ms(10), End: ms(200)})
	b.h.AddSection(Section{Client: "a", Key: "k", Token: "ta", Start: ms(100), End: ms(250)}) // same holder
	b.h.AddSection(Section{Client: "b", Key: "k", Token: "tb", Start: ms(240), End: ms(400)}) // a's ends at 250
	b.h.AddSection(Section{Client: "c", Key: "j", Token: "tc", Start: ms(240), End: ms(400)}) // another key
	r := Check(b.h, Config{Nodes: nodes})
	if r.Count(SEC) != 1 || r.Checked[SEC] == 0 {
		t.Fatalf("SEC: %d violations in %d cases, want 1:\n%v", r.Count(SEC), r.Checked[SEC], r)
	}
	if !strings.Contains(r.String(), "ta") || !strings.Contains(r.String(), "tb") {
		t.Errorf("the report does not name both holders:\n%v", r)
	}
}

// TestSECOverrun: a section that ran past its own lock's validity and met
// the next holder's is an SEC violation that says so, or a note with
// TolerateOverruns.
func TestSECOverrun(t *testing.T) {
	b := newBuilder()
	b.acquire("a", "k", "ta", 1, 0, 0, 5) // deadline ~990 ms, never released
	b.acquire("b", "k", "tb", 2, 1000, 1000, 1005)
	b.h.AddSection(Section{Client: "a", Key: "k", Token: "ta", Start: ms(10), End: ms(1200)})
	b.h.AddSection(Section{Client: "b", Key: "k", Token: "tb", Start: ms(1010), End: ms(1020)})
	r := Check(b.h, Config{Nodes: nodes})
	if r.Count(SEC) != 1 || !strings.Contains(r.String(), "ran past its lock's validity") {
		t.Fatalf("SEC: %d violations, want 1 naming the overrun:\n%v", r.Count(SEC), r)
	}
	r = Check(b.h, Config{Nodes: nodes, TolerateOverruns: true})
	if r.Count(SEC) != 0 || !strings.Contains(strings.Join(r.Notes, "\n"), "SEC: 1 overlaps") {
		t.Fatalf("with TolerateOverruns: %d violations, notes %q; want a note", r.Count(SEC), r.Notes)
	}
}

// TestS2DeadlineAfterReturn: a deadline more than TTL − allowance after
// the call returned counts its validity from after the round.
func TestS2DeadlineAfterReturn(t *testing.T) {
	b := newBuilder()
	b.h.Add(Op{Client: "a", Key: "k", Kind: Acquire, Start: 0, End: ms(10), Outcome: OK, Token: "ta", TTL: ttl,
		Deadline: ms(15) + ttl - allow})
	r := Check(b.h, Config{Nodes: nodes})
	if r.Count(S2) != 1 || !strings.Contains(r.String(), "after the call returned") {
		t.Fatalf("S2: %d violations, want 1:\n%v", r.Count(S2), r)
	}
}
