package history_test

import (
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/drift"
	"github.com/quorumlock/quorumlock/testkit/history"
)

// TestHistoryChecker shows that the checker reports what the integration
// scenarios rely on it to report: two holders of one key inside one window
// (S1), deadlines outside their bounds (S2), fences that do not
// increase or are 0 (S4), a counter that lost an increment (S5), and two
// critical sections that overlap because one ran past its lock's deadline
// (SEC).
func TestHistoryChecker(t *testing.T) {
	const ttl = time.Second
	allow := drift.Allowance(ttl, drift.DefaultFactor)
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	// hold records holder who of key k with fence f: its acquire call ran
	// from start to ret (ms), its deadline is TTL − allowance after start
	// plus skew, its critical section incremented the counter from read
	// over [ret, rel], and its release started at rel (none if rel < 0).
	type hold struct {
		who        string
		f          uint64
		start, ret int
		rel        int
		skew       time.Duration
		read       int64
	}
	build := func(holds []hold, counter int64) *history.History {
		h := history.New()
		for _, x := range holds {
			h.Add(history.Op{Client: x.who, Key: "k", Kind: history.Acquire, Outcome: history.OK, Token: x.who, Fence: x.f, TTL: ttl,
				Start: ms(x.start), End: ms(x.ret), Deadline: ms(x.start) + ttl - allow + x.skew})
			end := ms(x.rel)
			if x.rel < 0 {
				end = ttl + ms(100) // past the deadline
			} else {
				h.Add(history.Op{Client: x.who, Key: "k", Kind: history.Release, Outcome: history.OK, Token: x.who, Fence: x.f, Start: end, End: end + ms(1)})
			}
			h.AddSection(history.Section{Client: x.who, Key: "k", Token: x.who, Fence: x.f, Start: ms(x.ret), End: end, Counted: true, Read: x.read, Wrote: true})
		}
		h.SetCounter("k", counter)
		return h
	}
	for _, tc := range []struct {
		name    string
		holds   []hold
		counter int64
		want    map[history.Property]int
	}{
		{"sequential holders", []hold{{"a", 3, 0, 1, 10, 0, 0}, {"b", 5, 5, 11, 20, 0, 1}, {"c", 6, 21, 22, 30, 0, 2}}, 3,
			map[history.Property]int{}},
		{"two holders inside a's window", []hold{{"a", 3, 0, 1, 100, 0, 0}, {"b", 5, 0, 2, 3, 0, 1}, {"c", 6, 0, 50, 60, 0, 2}}, 3,
			map[history.Property]int{history.S1: 2, history.SEC: 2}},
		{"no drift allowance deducted", []hold{{"a", 3, 0, 1, 10, allow, 0}}, 1,
			map[history.Property]int{history.S2: 1}},
		{"deadline below start + TTL − allowance", []hold{{"a", 3, 0, 1, 10, -ms(5), 0}}, 1,
			map[history.Property]int{history.S2: 1}},
		{"duplicate fence", []hold{{"a", 3, 0, 1, 10, 0, 0}, {"b", 3, 2, 11, 20, 0, 1}}, 2,
			map[history.Property]int{history.S4: 1}},
		{"falling fence", []hold{{"a", 3, 0, 1, 10, 0, 0}, {"b", 9, 0, 20, 30, 0, 1}, {"c", 4, 15, 40, 50, 0, 2}}, 3,
			map[history.Property]int{history.S4: 1}},
		{"fence 0", []hold{{"a", 0, 0, 1, 10, 0, 0}}, 1,
			map[history.Property]int{history.S4: 1}},
		{"lost increment", []hold{{"a", 3, 0, 1, 10, 0, 0}, {"b", 5, 5, 11, 20, 0, 1}}, 1,
			map[history.Property]int{history.S5: 1}},
		{"section past the deadline, overlapped", []hold{{"a", 3, 0, 1, -1, 0, 0}, {"b", 5, 990, 1000, 1200, 0, 1}}, 2,
			map[history.Property]int{history.SEC: 1}},
	} {
		r := history.Check(build(tc.holds, tc.counter), history.Config{Nodes: 5, Fencing: true})
		for _, p := range []history.Property{history.S1, history.S2, history.S4, history.S5, history.SEC} {
			if r.Count(p) != tc.want[p] {
				t.Errorf("%s: %d %s violations, want %d:\n%s", tc.name, r.Count(p), p, tc.want[p], r)
			}
		}
	}
}
