package sim

import (
	"fmt"
	"testing"
)

// TestStoreExpiry: keys expire on the node's clock as in Redis (PX, PTTL,
// PEXPIRE with and without GT, SET without PX clearing the TTL), which the
// comparison with a real server cannot time precisely.
func TestStoreExpiry(t *testing.T) {
	s := newStore()
	ms := int64(1e6)
	steps := []struct {
		at   int64 // ms
		cmd  []string
		want string
	}{
		{0, []string{"SET", "k", "v", "PX", "100"}, "OK"},
		{0, []string{"PTTL", "k"}, "100"},
		{60, []string{"PTTL", "k"}, "40"},
		{60, []string{"PEXPIRE", "k", "10", "GT"}, "0"}, // 10 ms is shorter: kept
		{60, []string{"PTTL", "k"}, "40"},
		{60, []string{"PEXPIRE", "k", "10"}, "1"}, // without GT it shortens
		{69, []string{"GET", "k"}, "v"},
		{70, []string{"GET", "k"}, "<nil>"}, // gone at its expiry
		{70, []string{"PTTL", "k"}, "-2"},
		{70, []string{"PEXPIRE", "k", "100"}, "0"},
		{70, []string{"SET", "k", "w", "PX", "50"}, "OK"},
		{80, []string{"SET", "k", "x"}, "OK"}, // no PX: no TTL
		{80, []string{"PTTL", "k"}, "-1"},
		{80, []string{"PEXPIRE", "k", "50", "GT"}, "0"}, // no TTL counts as infinite
		{80, []string{"INCR", "n"}, "1"},
		{80, []string{"INCR", "n"}, "2"},
		{80, []string{"INCR", "k"}, "ERR value is not an integer or out of range"},
		{80, []string{"ZADD", "z", "3", "m"}, "1"},
		{80, []string{"GET", "z"}, errWrongType.Error()},
		{80, []string{"PEXPIRE", "z", "5"}, "1"},
		{85, []string{"ZCARD", "z"}, "0"},
		{1500, []string{"TIME"}, fmt.Sprint([]any{"1767225601", "500000"})},
	}
	for _, st := range steps {
		r, err := s.call(nodeClockBase+st.at*ms, st.cmd)
		got := fmt.Sprint(r)
		if err != nil {
			got = err.Error()
		} else if r == nil {
			got = "<nil>"
		}
		if got != st.want {
			t.Fatalf("at %d ms, %q = %s, want %s", st.at, st.cmd, got, st.want)
		}
	}
}
