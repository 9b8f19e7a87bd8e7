package history

import (
	"github.com/quorumlock/quorumlock/internal/node"
)

// checkElections (ELE) judges the leaders clients read (Observation). An
// election's leaders are the holdings of its key won by Campaign
// (Op.Election): S1 already requires that no two of them overlap, and S4
// that their terms (fences) strictly increase, so ELE judges what was
// read:
//
//   - along each Observe stream (Observation.Observer), terms strictly
//     increase;
//   - a leader read with term T and value v: if a leader of the election
//     had fence T, its value is v; and if exactly one leader had value v
//     (a Campaign's value, node.SplitToken of its token), then T is above
//     the fence of every other leader whose Campaign returned before the
//     read began (a read can catch a round of that Campaign that failed
//     before another leader's, docs/safety.md E4), T is no more
//     than its own fence (Leader reads the term from the nodes that hold its
//     token while its fence write-back may still be landing) unless the
//     read began after the leader's window ended (a round of its Campaign
//     that failed, with the same value, may have landed late and taken a
//     later counter: counted with the values no leader had), T equals its
//     fence when the read began after its Campaign returned, and the read
//     ended after its Campaign began.
//
// A leader read whose value no leader of the history had (a round that
// failed can be read while its token is on a quorum) is counted in a note.
func checkElections(s snapshot, byKey map[string][]*holding, r *Report) {
	names := map[string]bool{}
	for key, xs := range byKey {
		for _, x := range xs {
			if x.election && x.key == key {
				names[key] = true
				r.Leaders++
			}
		}
	}
	for _, o := range s.observed {
		names[o.Election] = true
	}
	r.Elections = len(names)
	if len(s.observed) == 0 {
		r.Skipped[ELE] = "no leader observed (S1 and S4 judge the leaders themselves)"
		return
	}
	r.Observed = len(s.observed)
	type stream struct{ client, observer string }
	last := map[stream]Observation{}
	unmatched, ambiguous := 0, 0
	for _, o := range s.observed {
		if o.Observer != "" {
			st := stream{o.Client, o.Observer}
			if prev, ok := last[st]; ok {
				r.Checked[ELE]++
				if o.Term <= prev.Term {
					r.add(ELE, o.Election, "observer %s of %s received %q with term %d at %v after %q with term %d at %v: terms must strictly increase",
						o.Observer, o.Client, o.Value, o.Term, us(o.End), prev.Value, prev.Term, us(prev.End))
				}
			}
			last[st] = o
		}
		var leaders []*holding
		for _, x := range byKey[o.Election] {
			if x.election {
				leaders = append(leaders, x)
			}
		}
		switch n := judgeObservation(o, leaders, r); {
		case n == 0:
			unmatched++
		case n > 1:
			ambiguous++
		default:
			r.Matched++
		}
	}
	if unmatched+ambiguous > 0 {
		r.note("ELE: %d leaders read had a value no leader of the history had (a failed round's, read while its token was on a quorum), and %d a value several had (not matched)", unmatched, ambiguous)
	}
}

// judgeObservation checks o against the leaders of its election (in order
// of return) and returns how many had its value.
func judgeObservation(o Observation, leaders []*holding, r *Report) int {
	var match []int
	for i, x := range leaders {
		_, v := node.SplitToken(x.token)
		if x.fence == o.Term && v != o.Value {
			r.Checked[ELE]++
			r.add(ELE, o.Election, "%s read %q with term %d at %v, but term %d's leader was %q: %s", o.Client, o.Value, o.Term, us(o.End), o.Term, v, x)
		}
		if v == o.Value {
			match = append(match, i)
		}
	}
	if len(match) != 1 {
		return len(match)
	}
	x := leaders[match[0]]
	r.Checked[ELE]++
	var before *holding // the leader with the highest term whose Campaign returned before the read began
	for _, y := range leaders {
		if y != x && y.ret <= o.Start && (before == nil || y.fence > before.fence) {
			before = y
		}
	}
	switch {
	case before != nil && o.Term <= before.fence:
		r.add(ELE, o.Election, "%s read %q with term %d in [%v, %v], not above the term %d of a leader whose Campaign had returned, %s", o.Client, o.Value, o.Term, us(o.Start), us(o.End), before.fence, before)
	case o.Term > x.fence && o.Start > x.end:
		return 0 // a round of its Campaign that failed, landed late after its window: a value no leader had
	case o.Term > x.fence:
		r.add(ELE, o.Election, "%s read %q with term %d at %v, above the leader's own term (its fence) %d: %s", o.Client, o.Value, o.Term, us(o.End), x.fence, x)
	case o.Start >= x.ret && o.Term != x.fence:
		r.add(ELE, o.Election, "%s read %q with term %d in [%v, %v], after its Campaign returned, but the leader's term (its fence) is %d: %s", o.Client, o.Value, o.Term, us(o.Start), us(o.End), x.fence, x)
	case o.End < x.start:
		r.add(ELE, o.Election, "%s read %q with term %d by %v, before the leader's Campaign began: %s", o.Client, o.Value, o.Term, us(o.End), x)
	}
	return 1
}
