//go:build quorumlock_oldextend

package sim

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/quorumlock/quorumlock/testkit/history"
)

// TestFindsTheOldExtendBug runs against the extend script as it was before
// late landings were fixed (-tags quorumlock_oldextend: it sets the TTL
// whatever the key had) and requires the simulator to find, by itself, two
// holders of one key (S1) where an extend that its caller had given up on
// landed late and cut the key short: another client then took the key while
// the holder still believed it held the lock. It plays the schedules of
// locks alone (locksOnly: the seeds as they were before semaphores and
// elections were added, where it finds one at seed 1188; with them, in half
// the schedules a third of the operations are permits and campaigns, and
// the first comes at seed 3702). make test runs it.
func TestFindsTheOldExtendBug(t *testing.T) {
	var anyS1, late uint64
	_, played := sweep(t, 1, 5000, locksOnly, func(seed uint64, o outcome) bool {
		if o.report.Count(history.S1) == 0 {
			return false
		}
		if anyS1 == 0 || seed < anyS1 {
			anyS1 = seed
		}
		tr := play(t, seed, locksOnly, true) // again, traced, to see how
		if !lateExtendOf(tr, s1Tokens(tr.report)) {
			return false
		}
		if late == 0 || seed < late {
			late = seed
			t.Logf("seed %d (replay with -tags quorumlock_oldextend: %s):\n%s", seed, replayLine(seed, locksOnly), tr.report)
		}
		return true
	})
	if late == 0 {
		t.Fatalf("no two holders after a late extend in %d schedules against the old extend script (first two holders of any cause: seed %d)", played, anyS1)
	}
	t.Logf("%d schedules played; first two holders at seed %d; first two holders after a late extend at seed %d", played, anyS1, late)
}

var tokenRE = regexp.MustCompile(`token (\S+?),`)

// s1Tokens are the tokens named by rep's S1 violations.
func s1Tokens(rep *history.Report) []string {
	var toks []string
	for _, v := range rep.Violations {
		if v.Property == history.S1 {
			for _, m := range tokenRE.FindAllStringSubmatch(v.Msg, -1) {
				toks = append(toks, m[1])
			}
		}
	}
	return toks
}

// ranRE reads a trace line of a command that ran: when, on which node,
// the command, its token, whether it landed after its caller gave up, and
// the reply.
var ranRE = regexp.MustCompile(`^\s*([\d.]+)ms\s+\S+→(n\d+)#\d+ (\S+) "[^"]*" token (\S+) .*ran on n\d+( LATE)?[^:]*: (-?\d+)`)

// lateExtendOf reports whether o's trace shows the bug's schedule: an
// extend of one of tokens that ran on a node after its caller had given up
// on it, found the key, and was followed on that node by another of tokens
// acquiring the key (the extend cut the key short there) for another
// client.
func lateExtendOf(o outcome, tokens []string) bool {
	type ran struct {
		at             float64
		node, cmd, tok string
		late           bool
		reply          int
	}
	var rs []ran
	for _, l := range strings.Split(o.trace.String(), "\n") {
		m := ranRE.FindStringSubmatch(l)
		if m == nil || !slices.Contains(tokens, m[4]) {
			continue
		}
		at, _ := strconv.ParseFloat(m[1], 64)
		reply, _ := strconv.Atoi(m[6])
		rs = append(rs, ran{at, m[2], m[3], m[4], m[5] != "", reply})
	}
	for _, e := range rs {
		if e.cmd != "EXTEND" || !e.late || e.reply != 1 {
			continue
		}
		for _, a := range rs {
			if strings.HasPrefix(a.cmd, "ACQUIRE") && a.node == e.node && client(a.tok) != client(e.tok) && a.at > e.at && a.reply > 0 {
				return true
			}
		}
	}
	return false
}

// client is the client a token of the simulation belongs to ("c1-…").
func client(tok string) string {
	c, _, _ := strings.Cut(tok, "-")
	return c
}
