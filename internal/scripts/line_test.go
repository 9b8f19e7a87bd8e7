package scripts_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/internal/redisproc"
	"github.com/quorumlock/quorumlock/internal/scripts"
)

// The line of waiters and the hand-off, script by script, on a real Redis
// server: the order of waiters, the key handed to exactly the first one, and
// the commands that land late (an attempt after its waiter left, an entry
// whose waiter stopped asking).

const (
	key   = "quorumlock:{k}"
	line  = key + "\x1fq"
	grace = 5000 // ms: long enough that no test sees a hand-off lapse
	ttl   = 60000
)

type lineEnv struct {
	t   *testing.T
	ctx context.Context
	rdb *redis.Client
}

func newLineEnv(t *testing.T) *lineEnv {
	return &lineEnv{t: t, ctx: context.Background(), rdb: redisproc.Start(t, 1).Clients(t)[0]}
}

// acquire runs the acquire script for token as waiter w ("" : none),
// ranked rank, its entry living lineTTL ms; it returns the script's answer.
func (e *lineEnv) acquire(token, w string, rank, lineTTL int64, inLine bool) int64 {
	e.t.Helper()
	args := []any{token, 10000}
	if w != "" {
		in := "0"
		if inLine {
			in = "1"
		}
		args = append(args, w, rank, lineTTL, in)
	}
	n, err := scripts.Acquire.Run(e.ctx, e.rdb, []string{key}, args...).Int64()
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

// release runs the release script with a hand-off; holder, if not "", is
// the releasing lock's waiter. It returns the answer: 1 or 0, followed by
// 0x1f and the waiter when it handed the key to one.
func (e *lineEnv) release(token, holder string) string {
	e.t.Helper()
	args := []any{token, grace}
	if holder != "" {
		args = append(args, holder, ttl)
	}
	v, err := scripts.Release.Run(e.ctx, e.rdb, []string{key}, args...).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	return fmt.Sprint(v)
}

func (e *lineEnv) leave(w string) int64 {
	e.t.Helper()
	n, err := scripts.Leave.Run(e.ctx, e.rdb, []string{key}, w, grace, ttl, 1).Int64()
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

func (e *lineEnv) waiters() []string {
	e.t.Helper()
	v, err := e.rdb.ZRange(e.ctx, line, 0, -1).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	return v
}

func (e *lineEnv) value() string {
	v, _ := e.rdb.Get(e.ctx, key).Result()
	return v
}

// TestHandOffOrder: waiters are ranked by their first attempt, whatever
// order they join in; a release hands the key to the first one only: it is
// taken for every other acquire, with or without a waiter, and free for
// that one, which leaves the line as it takes the key.
func TestHandOffOrder(t *testing.T) {
	e := newLineEnv(t)
	if e.acquire("h", "", 0, 0, false) != 1 {
		t.Fatal("the free key was not taken")
	}
	// Told "taken", a waiter learns the length of the line it joined.
	if n := e.acquire("a1", "A", 20, ttl, false); n != -1 { // joins second by rank, though first in time
		t.Fatalf("A's acquire of a taken key answered %d; want -1 (taken, one waiter in the line)", n)
	}
	if n := e.acquire("b1", "B", 10, ttl, false); n != -2 {
		t.Fatalf("B's acquire answered %d; want -2", n)
	}
	e.acquire("a2", "A", 99, ttl, true) // again: keeps its rank
	if got := e.waiters(); len(got) != 2 || got[0] != "B" || got[1] != "A" {
		t.Fatalf("line %q; want [B A]", got)
	}
	if got := e.release("h", ""); got != "1\x1fB" {
		t.Fatalf("release answered %q; want the key handed to B", got)
	}
	if e.acquire("x", "", 0, 0, false) != 0 || e.acquire("a3", "A", 20, ttl, true) != -2 {
		t.Fatal("a key handed to B was taken by another acquire")
	}
	if e.acquire("b2", "B", 10, ttl, true) != 1 || e.value() != "b2" {
		t.Fatalf("B did not take the key handed to it: %q", e.value())
	}
	if got := e.waiters(); len(got) != 1 || got[0] != "A" {
		t.Fatalf("line %q after B took the key; want [A]", got)
	}
	if got := e.release("b2", "B"); got != "1\x1fA" {
		t.Fatalf("B's release answered %q; want the key handed to A", got)
	}
}

// TestLateAttemptAfterLeave: a waiter whose Lock call ended left the line
// for good: its attempt that lands afterwards does not put it back, so no
// release hands the key to a waiter that is gone. (The demo stalled on such
// ghosts when attempts stuck behind a dead node landed after the leave.)
func TestLateAttemptAfterLeave(t *testing.T) {
	e := newLineEnv(t)
	e.acquire("h", "", 0, 0, false)
	e.acquire("w1", "W", 10, ttl, false)
	if e.leave("W") != 0 {
		t.Fatal("leave: the key had not been handed to W")
	}
	e.acquire("w2", "W", 10, ttl, true) // landed late
	if got := e.waiters(); len(got) != 0 {
		t.Fatalf("line %q after W left and its late attempt landed; want it empty", got)
	}
	if got := e.release("h", ""); got != "1" || e.value() != "" {
		t.Fatalf("release answered %q (key %q); want it free, handed to nobody", got, e.value())
	}
}

// TestLeaveHandsOn: a waiter that leaves while the key is handed to it
// hands it on to the next waiter.
func TestLeaveHandsOn(t *testing.T) {
	e := newLineEnv(t)
	e.acquire("h", "", 0, 0, false)
	e.acquire("a1", "A", 10, ttl, false)
	e.acquire("b1", "B", 20, ttl, false)
	e.release("h", "")
	if e.leave("A") != 1 || e.value() != "\x1eB" {
		t.Fatalf("after A left the key handed to it, the key holds %q; want it handed to B", e.value())
	}
}

// TestLapsedWaiter: a waiter that stops asking leaves the line when its
// entry lapses: the release hands the key past it.
func TestLapsedWaiter(t *testing.T) {
	e := newLineEnv(t)
	e.acquire("h", "", 0, 0, false)
	e.acquire("g1", "G", 10, 1, false) // its entry lapses in 1 ms
	e.acquire("b1", "B", 20, ttl, false)
	time.Sleep(10 * time.Millisecond)
	if got := e.release("h", ""); got != "1\x1fB" {
		t.Fatalf("release answered %q; want the key handed past the lapsed G to B", got)
	}
	if got := e.waiters(); len(got) != 1 || got[0] != "B" {
		t.Fatalf("line %q; want the lapsed G gone", got)
	}
}

// TestFencedTakenAnswersZero: a fenced acquire told "taken" answers 0 to a
// waiter too, not minus the line's length as the plain acquire does: its
// answer is a fencing counter, and a negative counter (changed outside
// quorumlock) must still read as an error, never as "taken".
func TestFencedTakenAnswersZero(t *testing.T) {
	e := newLineEnv(t)
	if e.acquire("h", "", 0, 0, false) != 1 {
		t.Fatal("the free key was not taken")
	}
	keys := []string{key, "quorumlock:fence", "quorumlock:fence"}
	for _, w := range []string{"A", "B"} {
		n, err := scripts.AcquireFenced.Run(e.ctx, e.rdb, keys, "t"+w, 10000, w, 10, ttl, "0").Int64()
		if err != nil || n != 0 {
			t.Fatalf("waiter %s's fenced acquire of a taken key answered %d, %v; want 0", w, n, err)
		}
	}
	if got := e.waiters(); len(got) != 2 {
		t.Fatalf("line %q; want both fenced waiters in it", got)
	}
}
