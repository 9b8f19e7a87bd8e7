package history

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/quorumlock/quorumlock/internal/scripts"
)

// The MONITOR lines quorumlock's scripts produce, as Redis 7 prints them:
// the EVALSHA first, then the commands the script ran.

func evalsha(s interface{ Hash() string }, keys []string, args ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `1700000000.000001 [0 127.0.0.1:50000] "evalsha" "%s" "%d"`, s.Hash(), len(keys))
	for _, a := range append(keys, args...) {
		fmt.Fprintf(&b, ` "%s"`, a)
	}
	return b.String()
}

func lua(args ...string) string {
	return `1700000000.000002 [0 lua] "` + strings.Join(args, `" "`) + `"`
}

func acquireLines(key, tok string) []string {
	return []string{
		evalsha(scripts.AcquireFenced, []string{key, key + ":fence"}, tok, "1000"),
		lua("SET", key, tok, "NX", "PX", "1000"),
		lua("INCR", key+":fence"),
	}
}

func takenLines(key, tok string) []string {
	return []string{
		evalsha(scripts.AcquireFenced, []string{key, key + ":fence"}, tok, "1000"),
		lua("SET", key, tok, "NX", "PX", "1000"),
	}
}

func releaseLines(key, tok string, deletes bool) []string {
	l := []string{evalsha(scripts.Release, []string{key}, tok), lua("GET", key)}
	if deletes {
		l = append(l, lua("DEL", key), lua("PUBLISH", key, "released"))
	}
	return l
}

func extendLines(key, tok string, extends bool) []string {
	l := []string{evalsha(scripts.Extend, []string{key}, tok, "1000"), lua("GET", key)}
	if extends {
		l = append(l, lua("PEXPIRE", key, "1000"))
	}
	return l
}

func resumeLines(key, tok string, extends bool) []string {
	l := []string{evalsha(scripts.Resume, []string{key}, tok, "1000"), lua("GET", key)}
	if extends {
		l = append(l, lua("PTTL", key), lua("PEXPIRE", key, "1000"))
	}
	return l
}

func inspectLines(key string) []string {
	return []string{evalsha(scripts.Inspect, []string{key, "quorumlock:fence", key + ":fence"}), lua("GET", key), lua("PTTL", key)}
}

func raiseLines(key, tok string, raises bool) []string {
	l := []string{evalsha(scripts.RaiseFence, []string{key, key + ":fence"}, tok, "7"), lua("GET", key)}
	if raises {
		l = append(l, lua("GET", key+":fence"), lua("SET", key+":fence", "7"))
	}
	return l
}

func feed(a *Audit, node int, lines ...string) {
	for _, l := range lines {
		e, err := ParseMonitorLine(l)
		if err != nil {
			panic(err)
		}
		a.Observe(node, e)
	}
}

func TestParseMonitorLine(t *testing.T) {
	for _, tc := range []struct {
		line string
		want Entry
	}{
		{`+1795245089.975338 [0 127.0.0.1:42628] "evalsha" "abc" "1" "k" "tok"` + "\r\n",
			Entry{Source: "127.0.0.1:42628", Args: []string{"evalsha", "abc", "1", "k", "tok"}}},
		{`1795245089.975411 [0 lua] "SET" "k" "tok" "NX" "PX" "1000"`,
			Entry{Source: "lua", Args: []string{"SET", "k", "tok", "NX", "PX", "1000"}}},
		{`1795245089.983334 [0 127.0.0.1:42640] "set" "a\"b" "x y\\n\n\xff"`,
			Entry{Source: "127.0.0.1:42640", Args: []string{"set", `a"b`, "x y\\n\n\xff"}}},
		{`1.0 [0 [::1]:6379] "ping"`, Entry{Source: "[::1]:6379", Args: []string{"ping"}}},
		{`1.0 [3 unix:/tmp/redis.sock] "get" ""`, Entry{Source: "unix:/tmp/redis.sock", Args: []string{"get", ""}}},
	} {
		got, err := ParseMonitorLine(tc.line)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseMonitorLine(%q) = %#v, %v; want %#v", tc.line, got, err, tc.want)
		}
	}
	for _, bad := range []string{"+OK", `1.0 "get"`, `1.0 [0 lua] "unterminated`, `1.0 [0 lua] "bad \q"`} {
		if e, err := ParseMonitorLine(bad); err == nil {
			t.Errorf("ParseMonitorLine(%q) = %#v, want an error", bad, e)
		}
	}
}

const lk = "quorumlock:{k}"

func TestAuditAcceptsOwnToken(t *testing.T) {
	a := NewAudit(AuditConfig{Prefix: "quorumlock:"})
	feed(a, 0, acquireLines(lk, "ta")...)
	feed(a, 0, extendLines(lk, "ta", true)...)
	feed(a, 0, raiseLines(lk, "ta", true)...)
	feed(a, 0, resumeLines(lk, "ta", true)...)
	feed(a, 0, inspectLines(lk)...)
	feed(a, 0, takenLines(lk, "tb")...)          // b is refused: nothing changes
	feed(a, 0, releaseLines(lk, "tb", false)...) // b's roll-back finds a's token: no delete
	feed(a, 0, releaseLines(lk, "ta", true)...)
	feed(a, 0, acquireLines(lk, "tb")...) // now b gets it
	feed(a, 0, releaseLines(lk, "tb", true)...)
	feed(a, 0, `1.0 [0 127.0.0.1:1] "get" "quorumlock:{k}"`, `1.0 [0 127.0.0.1:1] "pttl" "quorumlock:{k}"`) // reads
	if f, n := a.Findings(); n != 0 {
		t.Fatalf("violations in a correct stream: %v", f)
	}
	if st := a.Stats(); st.Checked != 5 || st.Unchecked != 0 {
		t.Errorf("stats %+v, want 5 checked (extend, raise, resume, two deletes)", st)
	}
}

func TestAuditFindsForeignChanges(t *testing.T) {
	for _, tc := range []struct {
		name  string
		lines []string
	}{
		{"release deletes another token", releaseLines(lk, "tb", true)},
		{"extend sets another token's TTL", extendLines(lk, "tb", true)},
		{"raise under another token", raiseLines(lk, "tb", true)},
		{"resume sets another token's TTL", resumeLines(lk, "tb", true)},
		{"inspect writes", append(inspectLines(lk), lua("DEL", lk))},
		{"plain DEL from a client", []string{`1.0 [0 127.0.0.1:9] "del" "quorumlock:{k}"`}},
		{"PEXPIRE from a client", []string{`1.0 [0 127.0.0.1:9] "pexpire" "quorumlock:{k}" "1"`}},
		{"foreign script", []string{`1.0 [0 127.0.0.1:9] "eval" "redis.call('DEL', KEYS[1])" "1" "quorumlock:{k}"`, lua("DEL", lk)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := NewAudit(AuditConfig{Prefix: "quorumlock:"})
			feed(a, 2, acquireLines(lk, "ta")...)
			feed(a, 2, tc.lines...)
			f, n := a.Findings()
			if n != 1 {
				t.Fatalf("%d violations, want 1: %v", n, f)
			}
			t.Log(f[0])
			if !strings.Contains(f[0].Msg, "node2") || f[0].Key != lk {
				t.Errorf("finding does not name the node and key: %v", f[0])
			}
		})
	}
}

func TestAuditAfterExpiryOrGap(t *testing.T) {
	// After a gap in the stream, the key's content is unknown: the delete
	// is not judged either way.
	a := NewAudit(AuditConfig{Prefix: "quorumlock:"})
	feed(a, 0, acquireLines(lk, "ta")...)
	a.Gap(0)
	feed(a, 0, releaseLines(lk, "tb", true)...)
	if _, n := a.Findings(); n != 0 || a.Stats().Unchecked != 1 {
		t.Errorf("after a gap: %d violations, stats %+v; want none and one unchecked", n, a.Stats())
	}
	// A key deleted by its holder is known absent: a delete by someone
	// else is a violation (a correct script deletes only its own token).
	a = NewAudit(AuditConfig{Prefix: "quorumlock:"})
	feed(a, 0, acquireLines(lk, "ta")...)
	feed(a, 0, releaseLines(lk, "ta", true)...)
	feed(a, 0, releaseLines(lk, "ta", true)...)
	if f, n := a.Findings(); n != 1 || !strings.Contains(f[0].Msg, "absent") {
		t.Errorf("a second delete of an absent key: %v", f)
	}
	// Nodes are independent; fence counters and other keys are not audited.
	a = NewAudit(AuditConfig{Prefix: "quorumlock:"})
	feed(a, 0, acquireLines(lk, "ta")...)
	feed(a, 1, acquireLines(lk, "tb")...)
	feed(a, 1, releaseLines(lk, "tb", true)...)
	feed(a, 0, `1.0 [0 127.0.0.1:9] "del" "quorumlock:{k}:fence" "other"`)
	if f, n := a.Findings(); n != 0 {
		t.Errorf("violations: %v", f)
	}
	// Injected writes are allowed when the test says so.
	a = NewAudit(AuditConfig{Prefix: "quorumlock:", AllowExternal: true})
	feed(a, 0, acquireLines(lk, "ta")...)
	feed(a, 0, `1.0 [0 127.0.0.1:9] "pexpire" "quorumlock:{k}" "1"`)
	feed(a, 0, releaseLines(lk, "tb", true)...) // content unknown after the injection
	if f, n := a.Findings(); n != 0 || a.Stats().External != 1 {
		t.Errorf("allowed injection: %v, stats %+v", f, a.Stats())
	}
}

// The MONITOR lines of a lock of several keys' scripts.

func acquireAllLines(keys []string, tok string) []string {
	all := append(append([]string{}, keys...), "quorumlock:fence")
	for _, k := range keys {
		all = append(all, k+":fence")
	}
	l := []string{evalsha(scripts.AcquireAll, all, tok, "1000", fmt.Sprint(len(keys)))}
	for _, k := range keys {
		l = append(l, lua("GET", k))
	}
	l = append(l, lua("INCR", "quorumlock:fence"))
	for _, k := range keys {
		l = append(l, lua("GET", k+":fence"))
	}
	for _, k := range keys {
		l = append(l, lua("GET", k), lua("SET", k, tok, "PX", "1000"))
	}
	return l
}

// releaseAllLines: held says which keys hold tok (and are deleted).
func releaseAllLines(keys []string, tok string, held ...bool) []string {
	l := []string{evalsha(scripts.ReleaseAll, keys, tok)}
	for i, k := range keys {
		l = append(l, lua("GET", k))
		if held[i] {
			l = append(l, lua("DEL", k), lua("PUBLISH", k, tok))
		}
	}
	return l
}

func heldAllLines(keys []string, tok string) []string {
	l := []string{evalsha(scripts.HeldAll, keys, tok)}
	for _, k := range keys {
		l = append(l, lua("GET", k))
	}
	return l
}

// raiseAllLines is the fencing write-back of a lock of several keys: the
// first key, the counter, then the others.
func raiseAllLines(keys []string, tok string) []string {
	l := []string{evalsha(scripts.RaiseFence, append([]string{keys[0], "quorumlock:fence"}, keys[1:]...), tok, "7")}
	for _, k := range keys {
		l = append(l, lua("GET", k))
	}
	return append(l, lua("GET", "quorumlock:fence"), lua("SET", "quorumlock:fence", "7"))
}

// extendAllLines is the extend of a lock of several keys: ExtendMany with
// its token once per key.
func extendAllLines(keys []string, tok string) []string {
	args := []string{"1000"}
	for range keys {
		args = append(args, tok)
	}
	l := []string{evalsha(scripts.ExtendMany, keys, args...)}
	for _, k := range keys {
		l = append(l, lua("GET", k), lua("PEXPIRE", k, "1000", "GT"))
	}
	return l
}

const (
	lka = "quorumlock:{a}"
	lkb = "quorumlock:{b}"
	lkc = "quorumlock:{c}"
)

func TestAuditSeveralKeys(t *testing.T) {
	a := NewAudit(AuditConfig{Prefix: "quorumlock:"})
	ab := []string{lka, lkb}
	feed(a, 0, acquireAllLines(ab, "ta")...)
	feed(a, 0, acquireLines(lkc, "tc")...)
	feed(a, 0, extendAllLines(ab, "ta")...)
	feed(a, 0, raiseAllLines(ab, "ta")...)
	feed(a, 0, heldAllLines(ab, "ta")...)
	feed(a, 0, releaseAllLines([]string{lkb, lkc}, "tb", false, false)...) // another lock's roll-back: nothing deleted
	feed(a, 0, releaseAllLines(ab, "ta", true, true)...)
	feed(a, 0, acquireLines(lkb, "tb")...) // now b is free for a lock of its own
	feed(a, 0, releaseLines(lkb, "tb", true)...)
	if f, n := a.Findings(); n != 0 {
		t.Fatalf("violations in a correct stream: %v", f)
	}
	if st := a.Stats(); st.Checked != 7 || st.Unchecked != 0 {
		t.Errorf("stats %+v, want 7 checked (two extends, two raises, three deletes)", st)
	}

	for _, tc := range []struct {
		name  string
		lines []string
	}{
		{"release of several keys deletes another token's key", releaseAllLines([]string{lka, lkc}, "ta", true, true)},
		{"extend of several keys sets another token's TTL", extendAllLines([]string{lka, lkc}, "ta")},
		{"raise while another key of the lock holds another token", raiseAllLines([]string{lka, lkc}, "ta")},
		{"the check of several keys writes", append(heldAllLines(ab, "ta"), lua("PEXPIRE", lkc, "1"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := NewAudit(AuditConfig{Prefix: "quorumlock:"})
			feed(a, 1, acquireAllLines(ab, "ta")...)
			feed(a, 1, acquireLines(lkc, "tc")...)
			feed(a, 1, tc.lines...)
			f, n := a.Findings()
			if n != 1 {
				t.Fatalf("%d violations, want 1: %v", n, f)
			}
			t.Log(f[0])
			if !strings.Contains(f[0].Msg, "node1") || f[0].Key != lkc {
				t.Errorf("finding does not name the node and the key %q: %v", lkc, f[0])
			}
		})
	}
}

// The MONITOR lines of shared holders' scripts: the key holds \x1c and the
// token that made it shared; the holders are in <key>\x1fr.

// joinLines is a shared join; first says it finds the key free and makes
// it shared (else it joins holders already there).
func joinLines(key, tok string, first bool) []string {
	r := key + `\x1fr`
	l := []string{evalsha(scripts.AcquireShared, []string{key}, tok, "1000"), lua("GET", key), lua("TIME")}
	if first {
		l = append(l, lua("EXISTS", key+`\x1fq`), lua("DEL", r), lua("SET", key, `\x1c`+tok, "PX", "1000"))
	} else {
		l = append(l, lua("ZSCORE", r, tok), lua("EXISTS", key+`\x1fq`))
	}
	return append(l, lua("ZADD", r, "1700000001000", tok), lua("PTTL", key), lua("PEXPIRE", key, "1000"), lua("PTTL", r), lua("PEXPIRE", r, "1000"))
}

func extendSharedLines(key, tok string) []string {
	r := key + `\x1fr`
	return []string{evalsha(scripts.ExtendShared, []string{key}, tok, "2000"), lua("GET", key), lua("ZSCORE", r, tok), lua("TIME"),
		lua("ZADD", r, "1700000002000", tok), lua("PTTL", key), lua("PEXPIRE", key, "2000"), lua("PTTL", r), lua("PEXPIRE", r, "2000")}
}

// leaveSharedLines is a shared release; last says no holder remains (the
// key is deleted).
func leaveSharedLines(key, tok string, last bool) []string {
	r := key + `\x1fr`
	l := []string{evalsha(scripts.ReleaseShared, []string{key}, tok), lua("GET", key), lua("ZSCORE", r, tok), lua("TIME"),
		lua("ZREM", r, tok), lua("ZRANGEBYSCORE", r, "1700000000001", "+inf")}
	if last {
		return append(l, lua("DEL", key, r), lua("PUBLISH", key, `\x1c`+tok))
	}
	return append(l, lua("ZSCORE", r, "other"), lua("PEXPIRE", key, "900"), lua("PEXPIRE", r, "900"))
}

func heldSharedLines(key, tok string) []string {
	return []string{evalsha(scripts.HeldShared, []string{key}, tok), lua("GET", key), lua("ZSCORE", key+`\x1fr`, tok), lua("TIME")}
}

func TestAuditShared(t *testing.T) {
	a := NewAudit(AuditConfig{Prefix: "quorumlock:"})
	feed(a, 0, joinLines(lka, "ta", true)...)
	feed(a, 0, joinLines(lka, "tb", false)...)
	feed(a, 0, extendSharedLines(lka, "tb")...)
	feed(a, 0, heldSharedLines(lka, "tb")...)
	feed(a, 0, leaveSharedLines(lka, "ta", false)...)
	feed(a, 0, leaveSharedLines(lka, "tb", true)...)
	feed(a, 0, acquireLines(lka, "tw")...) // free again: held alone
	feed(a, 0, releaseLines(lka, "tw", true)...)
	if f, n := a.Findings(); n != 0 {
		t.Fatalf("violations in a correct stream: %v", f)
	}
	if st := a.Stats(); st.Checked != 6 || st.Unchecked != 0 {
		t.Errorf("stats %+v, want 6 checked (two joins, an extend, two releases, the delete of the lock held alone)", st)
	}

	for _, tc := range []struct {
		name  string
		lines []string
	}{
		{"a join lengthens a key held alone", joinLines(lkc, "ts", false)},
		{"a shared extend lengthens a key held alone", extendSharedLines(lkc, "ts")},
		{"a shared release deletes a key held alone", leaveSharedLines(lkc, "ts", true)},
		{"a plain release deletes a shared key", releaseLines(lkb, "tb", true)},
		{"the shared check writes", append(heldSharedLines(lkb, "tb"), lua("PEXPIRE", lkb, "1"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := NewAudit(AuditConfig{Prefix: "quorumlock:"})
			feed(a, 1, joinLines(lkb, "tb", true)...)
			feed(a, 1, acquireLines(lkc, "tc")...)
			feed(a, 1, tc.lines...)
			f, n := a.Findings()
			if n != 1 {
				t.Fatalf("%d violations, want 1: %v", n, f)
			}
			t.Log(f[0])
			if !strings.Contains(f[0].Msg, "node1") {
				t.Errorf("finding does not name the node: %v", f[0])
			}
		})
	}
}
