package history

import (
	"strconv"
	"strings"
	"testing"

	"github.com/quorumlock/quorumlock/internal/scripts"
)

// The MONITOR lines of a semaphore's permits (acquire_permit.lua,
// extend_permit.lua), as Redis 7 prints them.

const (
	semCount = "quorumlock:{s}\x1fk"
	semP0    = "quorumlock:{s}\x1fp0"
	semP1    = "quorumlock:{s}\x1fp1"
)

// acquirePermitLines takes permit i (0-based) of the semaphore s of 2
// permits for tok: the count key is declared (absent) or lengthened.
func acquirePermitLines(tok string, i int, declare bool) []string {
	l := []string{evalsha(scripts.AcquirePermit, []string{semCount, semP0, semP1}, tok, "1000", "2", strconv.Itoa(i+1)),
		lua("GET", semCount), lua("EXISTS", semP0), lua("EXISTS", semP1), lua("GET", []string{semP0, semP1}[i]),
		lua("SET", []string{semP0, semP1}[i], tok, "PX", "1000")}
	if declare {
		return append(l, lua("SET", semCount, "2", "PX", "1000"))
	}
	return append(l, lua("PTTL", semCount), lua("PEXPIRE", semCount, "1000"))
}

// extendPermitLines extends permit key p for tok: when extends, p and the
// count key are lengthened.
func extendPermitLines(p, tok string, extends bool) []string {
	l := []string{evalsha(scripts.ExtendPermit, []string{p, semCount}, tok, "1000", "2"), lua("GET", p)}
	if extends {
		l = append(l, lua("PTTL", p), lua("PEXPIRE", p, "1000"), lua("EXISTS", semCount), lua("PTTL", semCount), lua("PEXPIRE", semCount, "1000"))
	}
	return l
}

func TestAuditPermits(t *testing.T) {
	a := NewAudit(AuditConfig{Prefix: "quorumlock:"})
	feed(a, 0, acquirePermitLines("ta", 0, true)...)
	feed(a, 0, acquirePermitLines("tb", 1, false)...)
	feed(a, 0, extendPermitLines(semP0, "ta", true)...)
	feed(a, 0, extendPermitLines(semP1, "ta", false)...) // a's extend of b's permit: refused
	// an extend whose permit's key already lives long enough: only the
	// count key, declared anew
	feed(a, 0, evalsha(scripts.ExtendPermit, []string{semP1, semCount}, "tb", "1000", "2"), lua("GET", semP1), lua("PTTL", semP1),
		lua("EXISTS", semCount), lua("SET", semCount, "2", "PX", "1000"))
	feed(a, 0, releaseLines(semP0, "ta", true)...)
	feed(a, 0, releaseLines(semP1, "tb", true)...)
	if f, n := a.Findings(); n != 0 {
		t.Fatalf("violations in a correct stream: %v", f)
	}
	if st := a.Stats(); st.Checked != 4 || st.External != 0 {
		t.Errorf("stats %+v, want 4 checked (two extends, two deletes) and nothing external", st)
	}
}

// TestAuditFindsBrokenPermits: controls: permit scripts that write what
// they may not, or change a permit another token holds, and a count key
// changed by hand, are reported.
func TestAuditFindsBrokenPermits(t *testing.T) {
	for _, tc := range []struct {
		name  string
		lines []string
		want  string
	}{
		{"extend of another's permit", append(acquirePermitLines("ta", 0, true), extendPermitLines(semP0, "tb", true)...), "extend set the TTL of"},
		{"count key lengthened for another's permit", append(acquirePermitLines("ta", 0, true),
			evalsha(scripts.ExtendPermit, []string{semP0, semCount}, "tb", "1000", "2"), lua("GET", semP0), lua("PEXPIRE", semCount, "1000")), "changed the count key"},
		{"acquire writes another permit", []string{evalsha(scripts.AcquirePermit, []string{semCount, semP0, semP1}, "ta", "1000", "2", "1"),
			lua("SET", semP1, "ta", "PX", "1000")}, "which it may not"},
		{"acquire declares another count", []string{evalsha(scripts.AcquirePermit, []string{semCount, semP0, semP1}, "ta", "1000", "2", "1"),
			lua("SET", semCount, "3", "PX", "1000")}, "which it may not"},
		{"count key deleted by hand", []string{`1.0 [0 127.0.0.1:1] "del" "` + semCount + `"`}, "changed outside"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := NewAudit(AuditConfig{Prefix: "quorumlock:"})
			feed(a, 0, tc.lines...)
			f, n := a.Findings()
			if n != 1 || !strings.Contains(f[0].Msg, tc.want) {
				t.Errorf("findings %v, want one that says %q", f, tc.want)
			}
		})
	}
}
