package sim

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/quorumlock/quorumlock/testkit/history"
)

// TestFindsBrokenAcquireAll runs the workload on nodes whose acquire_all.lua
// is broken (mutants) and requires the checker to find, by itself and
// within a few hundred schedules, two holders of one key of which one is a
// lock of several keys: with a script that takes keys that are held, and
// with one that checks only the first of its keys (the overlap is then on
// another key than the lock's first).
func TestFindsBrokenAcquireAll(t *testing.T) {
	for _, c := range []control{takeAll, firstOnly} {
		t.Run(string(c), func(t *testing.T) {
			findEach(t, c, "with a broken acquire_all.lua", map[string]func(history.Violation) bool{
				"S1 with a lock of several keys": func(v history.Violation) bool {
					return v.Property == history.S1 && strings.Contains(v.Msg, "(keys ") // its keys joined by '+'
				},
			})
		})
	}
}

// TestFindsBrokenShared runs the workload on nodes whose shared holders'
// scripts are broken (mutants) and requires the checker to find, within a
// few hundred schedules, a lock held alone overlapping a shared holder of
// its key: with a join that admits a shared holder over a key held alone,
// and with a release that deletes the key while other holders remain.
func TestFindsBrokenShared(t *testing.T) {
	for _, c := range []control{joinHeld, dropShared} {
		t.Run(string(c), func(t *testing.T) {
			findEach(t, c, "with a broken shared script", map[string]func(history.Violation) bool{
				"S1 with a shared holder": func(v history.Violation) bool {
					return v.Property == history.S1 && strings.Contains(v.Msg, "(shared, ")
				},
			})
		})
	}
}

// TestFindsBrokenPermit runs the workload on nodes whose acquire_permit.lua
// takes a permit that another token holds (mutants) and requires the
// checker to find, within a few hundred schedules, both two holders of one
// permit (S1 on its PermitKey) and more holders of a semaphore than it has
// permits (SEM).
func TestFindsBrokenPermit(t *testing.T) {
	findEach(t, takePermit, "with a broken acquire_permit.lua", map[string]func(history.Violation) bool{
		"S1 on a permit": func(v history.Violation) bool { return v.Property == history.S1 && strings.Contains(v.Key, "\x1fp") },
		"SEM":            func(v history.Violation) bool { return v.Property == history.SEM },
	})
}

// TestFindsSameTerm runs the workload on nodes whose acquire_fenced.lua
// does not increment the fencing counter (mutants), so that a new leader
// gets the term of the one before it, and requires the checker to find,
// within a few hundred schedules, both two leaders of the election whose
// terms do not increase (S4 on the election's key) and a leader read that
// names another leader than the one of its term, or a term not above the
// leader's before it (ELE).
func TestFindsSameTerm(t *testing.T) {
	findEach(t, sameTerm, "with an acquire_fenced.lua that does not increment", map[string]func(history.Violation) bool{
		"S4 on the election": func(v history.Violation) bool { return v.Property == history.S4 && v.Key == election },
		"ELE":                func(v history.Violation) bool { return v.Property == history.ELE },
	})
}

// findEach sweeps up to 600 schedules under control c until, for every
// kind, a violation of that kind has been found, and fails for each kind
// not found.
func findEach(t *testing.T, c control, under string, kinds map[string]func(history.Violation) bool) {
	first := map[string]uint64{}
	what := map[string]string{}
	found, played := sweep(t, 1, 600, c, func(seed uint64, o outcome) bool {
		for kind, is := range kinds {
			for _, v := range o.report.Violations {
				if is(v) {
					if f, ok := first[kind]; !ok || seed < f {
						first[kind], what[kind] = seed, v.String()
					}
					break
				}
			}
		}
		return len(first) == len(kinds)
	})
	for _, kind := range slices.Sorted(maps.Keys(kinds)) {
		f, ok := first[kind]
		if !ok {
			t.Errorf("no %s violation in %d schedules (%d violated) %s", kind, played, found, under)
			continue
		}
		t.Logf("%s caught within %d schedules (first at seed %d; replay: %s): %s", kind, played, f, replayLine(f, c), what[kind])
	}
}
