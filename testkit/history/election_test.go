package history

import (
	"strings"
	"testing"
)

// Elections (Op.Election, Observation): hand-made histories of leaders and
// of what observers read of them (ELE; S1 and S4 judge the leaders).

// leader records a won Campaign of election el by who, its token carrying
// value as the library's WithMetadata does, with term fence.
func (b *builder) leader(who, el, value string, fence uint64, start, round, ret int) string {
	tok := "t" + value + "\x1d" + value
	b.acquire(who, el, tok, fence, start, round, ret)
	b.h.ops[len(b.h.ops)-1].Election = true
	return tok
}

func (b *builder) observe(who, observer, el, value string, term uint64, start, end int) {
	b.h.AddObservation(Observation{Client: who, Observer: observer, Election: el, Value: value, Term: term, Start: ms(start), End: ms(end)})
}

// election adds a clean election "el": v1 leads with term 10 and resigns,
// v2 leads with term 11; an observer saw both, and a Leader call after v2's
// Campaign returned read its term.
func election(b *builder) {
	t1 := b.leader("a", "el", "v1", 10, 3000, 3000, 3005)
	b.release("a", "el", t1, 3010, 3011)
	t2 := b.leader("b", "el", "v2", 11, 3001, 3010, 3012)
	b.observe("o", "obs-1", "el", "v1", 10, 2990, 3006)
	b.observe("o", "obs-1", "el", "v2", 11, 2990, 3020)
	b.observe("o", "", "el", "v2", 11, 3021, 3022)
	b.release("b", "el", t2, 3030, 3031)
}

func TestElectionClean(t *testing.T) {
	b := newBuilder()
	election(b)
	r := check(t, b, cfg)
	want(t, r, nil)
	if r.Leaders != 2 || r.Elections != 1 || r.Observed != 3 || r.Matched != 3 || r.Checked[ELE] != 4 || r.Checked[S4] != 1 {
		t.Errorf("%d leaders of %d elections, %d observed, %d matched, %d ELE and %d S4 cases; want 2, 1, 3, 3, 4, 1", r.Leaders, r.Elections, r.Observed, r.Matched, r.Checked[ELE], r.Checked[S4])
	}
}

// TestElectionEarlyRoundRead: a read can catch a round of a Campaign that
// failed (its token on a quorum for a moment), before another leader's
// Campaign returned; when that Campaign wins later, with a higher term,
// the read is not judged against the leader that came in between.
func TestElectionEarlyRoundRead(t *testing.T) {
	b := newBuilder()
	t1 := b.leader("a", "el", "v1", 10, 3000, 3000, 3005)
	b.release("a", "el", t1, 3010, 3011)
	b.observe("o", "", "el", "v3", 11, 3007, 3009) // v3's failed round, read before v2's Campaign returned
	t2 := b.leader("b", "el", "v2", 12, 3001, 3010, 3012)
	b.release("b", "el", t2, 3030, 3031)
	t3 := b.leader("c", "el", "v3", 13, 3006, 3032, 3034)
	b.release("c", "el", t3, 3040, 3041)
	r := check(t, b, cfg)
	want(t, r, nil)
}

// TestElectionLateFailedRoundRead: a round of a Campaign that failed can
// land late, after the Campaign won with a later round and resigned, take
// a later counter and be read with the same value: a read that began after
// the leader's window ended is counted as a value no leader had, not
// judged against the leader's own term (simulator seeds 26055 and 28971).
// Read while the leader holds, the same term is a violation
// (TestElectionBroken).
func TestElectionLateFailedRoundRead(t *testing.T) {
	b := newBuilder()
	election(b)
	b.observe("o", "", "el", "v2", 12, 3032, 3033) // v2 resigned at 3030
	r := check(t, b, cfg)
	want(t, r, nil)
	if !strings.Contains(strings.Join(r.Notes, "\n"), "1 leaders read had a value no leader") {
		t.Errorf("the late round's read is not counted in a note: %q", r.Notes)
	}
}

// TestElectionBroken: controls: each broken history is reported.
func TestElectionBroken(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func(b *builder)
		cfg   func(c *Config)
		want  map[Property]int
		msg   string
	}{
		{"decreasing observed term", func(b *builder) {
			b.observe("p", "obs-2", "el", "v2", 11, 3000, 3020)
			b.observe("p", "obs-2", "el", "v1", 10, 3000, 3021)
		}, nil, map[Property]int{ELE: 1}, "terms must strictly increase"},
		{"term of another leader", func(b *builder) {
			b.observe("p", "", "el", "v1", 11, 3006, 3007)
		}, nil, map[Property]int{ELE: 2}, "term 11's leader was \"v2\""},
		{"term above its own fence, read after its Campaign returned", func(b *builder) {
			b.observe("p", "", "el", "v2", 12, 3021, 3022)
		}, nil, map[Property]int{ELE: 1}, "above the leader's own term"},
		{"term below its fence, read after its Campaign returned", func(b *builder) {
			b.observe("p", "", "el", "v2", 10, 3013, 3014)
		}, nil, map[Property]int{ELE: 2}, "not above the term 10 of a leader whose Campaign had returned"},
		{"two leaders overlapping", func(b *builder) {
			b.leader("c", "el", "v3", 12, 3020, 3020, 3025) // v2 holds until 3030
		}, nil, map[Property]int{S1: 1, LIN: 1}, "before the window of"},
		{"terms not increasing, fencing off", func(b *builder) {
			b.leader("c", "el", "v3", 9, 3040, 3040, 3045)
		}, func(c *Config) { c.Fencing = false }, map[Property]int{S4: 1}, "not more than the previous holder"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBuilder()
			election(b)
			tc.build(b)
			c := cfg
			if tc.cfg != nil {
				tc.cfg(&c)
			}
			r := check(t, b, c)
			want(t, r, tc.want)
			if !strings.Contains(r.String(), tc.msg) {
				t.Errorf("report lacks %q", tc.msg)
			}
		})
	}
}
