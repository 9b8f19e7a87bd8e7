//go:build quorumlock_bug_resumemark || quorumlock_bug_linegrowth || quorumlock_bug_linelapse || quorumlock_bug_latedrop || quorumlock_bug_leavelate || quorumlock_bug_stalldrop || quorumlock_bug_heldresend || quorumlock_bug_lostresend || quorumlock_bug_splitonce

package sim

import (
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/testkit/history"
)

// findRestored is the search of TestFindsBug…: it plays up to budget
// schedules of workload w from seed 1 (each of them aimed at the restored
// defect) and requires a violation of one of props; it logs the first seed
// that has one, with its report and the line that replays it, and how many
// schedules the search played.
func findRestored(t *testing.T, tag string, w workload, budget int, props ...history.Property) {
	c := workControl(w)
	start := time.Now()
	var first uint64
	var what string
	found, played := sweep(t, 1, budget, c, func(seed uint64, o outcome) bool {
		for _, p := range props {
			if o.report.Count(p) > 0 && (first == 0 || seed < first) {
				first, what = seed, o.report.String()
			}
		}
		return first != 0
	})
	if first == 0 {
		t.Fatalf("no %v violation in %d schedules of the %s workload (%d violated otherwise) with -tags %s", props, played, w, found, tag)
	}
	t.Logf("-tags %s: %v found at seed %d, within %d schedules of the %s workload (%v; replay with the tag: %s):\n%s",
		tag, props, first, played, w, time.Since(start).Round(time.Millisecond), replayLine(first, c), what)
}

// findListed is the search of a TestFindsBug… whose property the
// simulator judges itself (listed returns its violations in an outcome): it
// plays up to budget schedules under control c from seed 1, requires one
// with a violation of property (named for the messages) and logs the first
// seed that has one, with the line that replays it under tag.
func findListed(t *testing.T, tag, property string, c control, budget int, listed func(outcome) []string) {
	start := time.Now()
	var first uint64
	var what string
	found, played := sweep(t, 1, budget, c, func(seed uint64, o outcome) bool {
		if vs := listed(o); len(vs) > 0 && (first == 0 || seed < first) {
			first, what = seed, violationLines(vs)
		}
		return first != 0
	})
	if first == 0 {
		t.Fatalf("no %s violation in %d schedules (%d violated otherwise) with -tags %s", property, played, found, tag)
	}
	t.Logf("-tags %s: %s found at seed %d, within %d schedules (%v; replay with the tag: %s):\n%s",
		tag, property, first, played, time.Since(start).Round(time.Millisecond), replayLine(first, c), what)
}
