package sim

import (
	"slices"
	"strings"
	"testing"
)

// TestReplayIsDeterministic plays each seed twice and requires the same
// schedule: the same commands run on the same nodes with the same results,
// and the same operations succeed. (The library's error texts may differ
// in a latency they report when a node's timeout and the round's deadline
// fall on the same instant; they are not compared.)
func TestReplayIsDeterministic(t *testing.T) {
	for seed := uint64(1); seed <= 40; seed++ {
		a := ranLines(play(t, seed, none, true).trace)
		b := ranLines(play(t, seed, none, true).trace)
		if i := firstDiff(a, b); i >= 0 {
			t.Errorf("seed %d replayed differently from line %d of %d:\n%s\n%s", seed, i, len(a), at(a, i), at(b, i))
		}
	}
}

// ranLines are the trace's commands that ran, with their results, and the
// operations' outcomes, sorted: events of one instant on different links
// may be traced in either order.
func ranLines(tr *tracer) []string {
	var out []string
	for _, l := range strings.Split(tr.String(), "\n") {
		switch {
		case strings.Contains(l, " ran on "):
			out = append(out, l)
		case strings.Contains(l, ": ok"):
			out = append(out, l)
		}
	}
	slices.Sort(out)
	return out
}

func firstDiff(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

func at(ls []string, i int) string {
	if i < len(ls) {
		return ls[i]
	}
	return "(end)"
}

// TestAimedReplayIsDeterministic is TestReplayIsDeterministic for the
// aimed workloads (kinds.go): a few seeds of each, played twice.
func TestAimedReplayIsDeterministic(t *testing.T) {
	for _, k := range workloads {
		c := workControl(k.w)
		for seed := uint64(1); seed <= 3; seed++ {
			a := ranLines(play(t, seed, c, true).trace)
			b := ranLines(play(t, seed, c, true).trace)
			if i := firstDiff(a, b); i >= 0 {
				t.Errorf("%s seed %d replayed differently from line %d of %d:\n%s\n%s", k.w, seed, i, len(a), at(a, i), at(b, i))
			}
		}
	}
}
