package history

import (
	"strings"
	"testing"
)

// Semaphores (Op.Semaphore, Section.Semaphore): hand-made histories of
// permits, judged per permit key (S1...) and per semaphore (SEM).

// permit records a successful acquire of permit i of semaphore sem (k
// permits) by who: no fence, and no write-back among its yes-replies.
func (b *builder) permit(who, sem string, k, i int, tok string, start, round, ret int) {
	key := PermitKey(sem, i)
	for _, n := range []int{0, 1, 2} {
		b.h.AddReply(Reply{Client: who, Node: n, Kind: ReplyAcquire, Key: key, Token: tok, Start: ms(round), End: ms(ret - 1)})
	}
	b.h.Add(Op{Client: who, Key: key, Semaphore: sem, Permits: k, Kind: Acquire, Start: ms(start), End: ms(ret), Outcome: OK, Token: tok, TTL: ttl, Deadline: ms(round) + ttl - allow})
}

func (b *builder) releasePermit(who, sem string, k, i int, tok string, start, end int) {
	b.h.Add(Op{Client: who, Key: PermitKey(sem, i), Semaphore: sem, Permits: k, Kind: Release, Start: ms(start), End: ms(end), Outcome: OK, Token: tok})
}

func (b *builder) sectionPermit(who, sem string, k, i int, tok string, start, end int, read int64) {
	b.h.AddSection(Section{Client: who, Key: PermitKey(sem, i), Semaphore: sem, Permits: k, Token: tok, Start: ms(start), End: ms(end), Counted: true, Read: read, Wrote: true})
}

// semaphores adds a clean history of two semaphores: "s2" of 2 permits
// held by two at once, then a third after one left; "s1" of 1 permit held
// by one after the other.
func semaphores(b *builder) {
	b.permit("a", "s2", 2, 0, "pa", 2000, 2000, 2005)
	b.permit("b", "s2", 2, 1, "pb", 2001, 2001, 2006)
	b.sectionPermit("a", "s2", 2, 0, "pa", 2007, 2010, 0)
	b.sectionPermit("b", "s2", 2, 1, "pb", 2007, 2011, 0)
	b.releasePermit("a", "s2", 2, 0, "pa", 2012, 2013)
	b.permit("c", "s2", 2, 0, "pc", 2008, 2012, 2014) // waited for a's permit
	b.sectionPermit("c", "s2", 2, 0, "pc", 2015, 2016, 1)
	b.releasePermit("b", "s2", 2, 1, "pb", 2017, 2018)
	b.releasePermit("c", "s2", 2, 0, "pc", 2019, 2020)
	b.permit("d", "s1", 1, 0, "pd", 2000, 2000, 2003)
	b.releasePermit("d", "s1", 1, 0, "pd", 2004, 2005)
	b.permit("e", "s1", 1, 0, "pe", 2004, 2005, 2007)
	b.releasePermit("e", "s1", 1, 0, "pe", 2008, 2009)
}

func TestSemaphoreClean(t *testing.T) {
	b := newBuilder()
	semaphores(b)
	r := check(t, b, cfg)
	want(t, r, nil)
	if r.Permits != 5 || r.Semaphores != 2 || r.MostHolders["s2"] != (Crowd{Permits: 2, Most: 2}) || r.MostHolders["s1"] != (Crowd{Permits: 1, Most: 1}) {
		t.Errorf("%d permits of %d semaphores, most holders %v; want 5 of 2, s2 2 of 2, s1 1 of 1", r.Permits, r.Semaphores, r.MostHolders)
	}
	if r.Checked[SEM] != 8 || r.Checked[S1] != 2 || r.Checked[S4] != 0 {
		t.Errorf("checked %d SEM (5 windows, 3 sections), %d S1, %d S4 cases; want 8, 2, 0 (permits are unfenced)", r.Checked[SEM], r.Checked[S1], r.Checked[S4])
	}
}

// TestSemaphoreTwoOnOnePermit: control: two holders of a semaphore of one
// permit at once, on the permit's one key, are reported by S1 and SEM.
func TestSemaphoreTwoOnOnePermit(t *testing.T) {
	b := newBuilder()
	b.permit("a", "s", 1, 0, "pa", 0, 0, 5)
	b.permit("b", "s", 1, 0, "pb", 100, 100, 105) // inside a's window
	r := check(t, b, cfg)
	if r.Count(S1) != 1 || r.Count(SEM) != 1 || !strings.Contains(r.String(), "2 permit windows of a semaphore of 1 permits overlap") {
		t.Errorf("%d S1 and %d SEM violations, want 1 and 1", r.Count(S1), r.Count(SEM))
	}
	if r.MostHolders["s"].Most != 2 {
		t.Errorf("most holders %v, want 2", r.MostHolders)
	}
}

// TestSemaphoreMorePermitsThanDeclared: control: k+1 holders on k+1
// distinct permit keys (a client that counted another number of permits)
// overlap: SEM reports the count mismatch, the permit out of range and the
// k+1 windows at once; S1 has nothing to say (each key has one holder).
func TestSemaphoreMorePermitsThanDeclared(t *testing.T) {
	b := newBuilder()
	b.permit("a", "s", 2, 0, "pa", 0, 0, 5)
	b.permit("b", "s", 2, 1, "pb", 1, 1, 6)
	b.permit("c", "s", 3, 2, "pc", 2, 2, 7)
	r := check(t, b, cfg)
	want(t, r, map[Property]int{SEM: 3})
	for _, s := range []string{"recorded with", "not one of the semaphore's 2 permits", "3 permit windows of a semaphore of 2 permits overlap"} {
		if !strings.Contains(r.String(), s) {
			t.Errorf("report lacks %q", s)
		}
	}
}

// TestSemaphoreSections: control: three critical sections under permits
// of a semaphore of 2 overlap while the permits' windows do not (a holder
// ran on past its window): SEM reports it, or with TolerateOverruns notes
// it.
func TestSemaphoreSections(t *testing.T) {
	b := newBuilder()
	b.permit("a", "s", 2, 0, "pa", 0, 0, 5)
	b.permit("b", "s", 2, 1, "pb", 1, 1, 6)
	b.sectionPermit("a", "s", 2, 0, "pa", 6, 2000, 0) // past a's window (it ends near 990 ms)
	b.sectionPermit("b", "s", 2, 1, "pb", 7, 20, 0)
	b.releasePermit("b", "s", 2, 1, "pb", 21, 22)
	b.permit("c", "s", 2, 1, "pc", 21, 22, 23)
	b.sectionPermit("c", "s", 2, 1, "pc", 24, 30, 1)
	b.releasePermit("c", "s", 2, 1, "pc", 31, 32)
	b.permit("d", "s", 2, 0, "pd", 1000, 1000, 1001) // a's permit expired
	b.sectionPermit("d", "s", 2, 0, "pd", 1002, 1003, 1)
	b.permit("e", "s", 2, 1, "pe", 1000, 1000, 1001)
	b.sectionPermit("e", "s", 2, 1, "pe", 1002, 1004, 2)
	c := cfg
	r := check(t, b, c)
	if r.Count(SEM) != 1 || !strings.Contains(r.String(), "3 critical sections under permits") {
		t.Errorf("%d SEM violations, want 1 (three sections at once)", r.Count(SEM))
	}
	c.TolerateOverruns = true
	r = check(t, b, c)
	if r.Count(SEM) != 0 || !strings.Contains(r.String(), "SEM: 1 times") {
		t.Errorf("with TolerateOverruns: %d SEM violations and no note, want 0 and a note", r.Count(SEM))
	}
}
