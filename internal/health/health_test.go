package health

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

// TestOutageLoggedOnce: an outage logs its beginning and its end once
// each, however many commands fail in it; an error reply is no outage and
// is logged once per kind; a Log on a logger that drops warnings is nil and
// does nothing.
func TestOutageLoggedOnce(t *testing.T) {
	var buf bytes.Buffer
	h := New(slog.New(slog.NewTextHandler(&buf, nil)), []string{"a", "b"})
	for range 5 {
		h.Failed(1, errors.New("dial tcp: connection refused"))
	}
	h.Answered(0) // never down: nothing to say
	h.Answered(1)
	h.Answered(1)
	for range 3 {
		h.Failed(0, reply("OOM command not allowed"))
	}
	out := buf.String()
	for what, want := range map[string]int{
		"node b unreachable since": 1, "node b answers again": 1, "(5 failed commands)": 1,
		"node a refuses a lock command: OOM": 1, "node a unreachable": 0,
	} {
		if got := strings.Count(out, what); got != want {
			t.Errorf("%q logged %d times, want %d:\n%s", what, got, want, out)
		}
	}
	quiet := New(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelError})), []string{"a"})
	if quiet != nil {
		t.Fatal("a Log on a logger that drops warnings is not nil")
	}
	quiet.Failed(0, errors.New("x")) // a nil Log does nothing
	quiet.Answered(0)
}

// reply is a node's error reply, as go-redis returns one (redis.Error).
type reply string

func (e reply) Error() string { return string(e) }
func (reply) RedisError()     {}
