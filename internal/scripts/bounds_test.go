package scripts_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/internal/scripts"
)

// TestBoundsMatchLib: the bounds package scripts exports are the ones
// lib.lua enforces.
func TestBoundsMatchLib(t *testing.T) {
	lib := scripts.Lib()
	for _, want := range []string{
		fmt.Sprintf("local LINE_MAX = %d\n", scripts.LineMax),
		fmt.Sprintf("local SHARED_MAX = %d\n", scripts.SharedMax),
		fmt.Sprintf("local PRUNE = %d\n", scripts.Prune),
	} {
		if !strings.Contains(lib, want) {
			t.Errorf("lib.lua does not say %q", strings.TrimSpace(want))
		}
	}
}

// card is the size of the sorted set of key on e's server.
func (e *lineEnv) card(k string) int64 {
	e.t.Helper()
	n, err := e.rdb.ZCard(e.ctx, k).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

// TestLineStaysBounded: waiters that join and give up (their Lock calls
// end after one attempt), 3 × LineMax of them, never make the line, or
// the set of waiters that left it, hold more than LineMax entries, and the
// releases afterwards succeed and hand the key to a live waiter. Before,
// join and leave never dropped a lapsed entry; one release dropped them
// all in one unpack, and with ~8,000 it failed on every node ("too many
// results to unpack").
func TestLineStaysBounded(t *testing.T) {
	e := newLineEnv(t)
	e.acquire("h", "", 0, 0, false)
	// h holds the key for a minute, not acquire's 10 s: the 3,000 joins
	// took 11 s under make test, and the releases then found it expired.
	if err := e.rdb.PExpire(e.ctx, key, ttl*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	e.acquire("p", "P", 1<<41, ttl, false) // a waiter for a minute keeps the line's keys alive
	const short = 20                       // ms: each entry lapses soon after its waiter left
	for i := range 3 * scripts.LineMax {
		w := fmt.Sprintf("c.%d", i)
		e.acquire("t"+w, w, int64(i), short, false)
		if i%2 == 0 { // half leave for good, half just stop asking
			if _, err := scripts.Leave.Run(e.ctx, e.rdb, []string{key}, w, grace, short, 1).Result(); err != nil {
				t.Fatal(err)
			}
		}
		if i%500 == 0 {
			time.Sleep(2 * short * time.Millisecond) // let the earlier ones lapse
		}
		if i%50 == 49 {
			e.checkBound(i + 1)
		}
	}
	time.Sleep(2 * short * time.Millisecond) // the last ones lapse too
	e.acquire("live", "L", 1<<40, ttl, false)
	// Each release reads at most Prune entries of the line's head and drops
	// the lapsed ones: the key goes to L once those before it are gone.
	for i := range scripts.LineMax/scripts.Prune + 1 {
		got := e.release("h", "")
		if got == "1\x1fL" {
			return
		}
		if got != "1" {
			t.Fatalf("release %d after %d waiters answered %q; want 1, or the key handed to the live waiter L", i+1, 3*scripts.LineMax, got)
		}
		e.acquire("h", "", 0, 0, false)
	}
	t.Fatalf("%d releases did not hand the key to the live waiter L", scripts.LineMax/scripts.Prune+1)
}

// TestFullLineTakesNoNewcomer: a line of LineMax live waiters takes no
// more; the newcomer is told "taken" all the same and waits without a place.
func TestFullLineTakesNoNewcomer(t *testing.T) {
	e := newLineEnv(t)
	e.acquire("h", "", 0, 0, false)
	for i := range scripts.LineMax {
		e.acquire(fmt.Sprint("t", i), fmt.Sprint("c.", i), int64(i), ttl, false)
	}
	if n := e.acquire("late", "late", 1<<40, ttl, false); n >= 0 {
		t.Fatalf("a newcomer to a full line was answered %d; want taken (negative)", n)
	}
	if n := e.card(line); n != scripts.LineMax {
		t.Fatalf("the full line holds %d entries; want %d", n, scripts.LineMax)
	}
}

// TestPollingKeepsThePlace: a waiter that keeps asking keeps its place
// long after the last newcomer joined, and holds shared holders back all
// that time. Before, the line's TTL was renewed only when a new waiter
// joined, so the line lapsed under a waiter that still polled, and its own
// entry then read as one that had left for good.
func TestPollingKeepsThePlace(t *testing.T) {
	e := newLineEnv(t)
	e.acquire("h", "", 0, 0, false)
	// 4 entry TTLs, polling every half of one: the other half is slack for
	// a loaded machine (at 100 ms and every 0.6, a poll 40 ms late under
	// make test found the line lapsed).
	const entry = 500 // ms
	e.acquire("w0", "W", 1, entry, false)
	for i := range 8 {
		time.Sleep(entry / 2 * time.Millisecond)
		if got := e.waiters(); len(got) != 1 || got[0] != "W" {
			t.Fatalf("after %d polls the line is %q; want [W]", i, got)
		}
		e.acquire(fmt.Sprint("w", i+1), "W", 1, entry, true)
	}
	if n, err := scripts.AcquireShared.Run(e.ctx, e.rdb, []string{key + "s"}, "r", ttl).Int64(); err != nil || n != 1 {
		t.Fatalf("a shared acquire of another key answered %d, %v", n, err)
	}
	if got := e.release("h", ""); got != "1\x1fW" {
		t.Fatalf("the release answered %q; want the key handed to W, which polled all along", got)
	}
}

// TestMarksAreNoTokens: a value the nodes keep as a mark (a shared key's,
// a handed key's, a session lock's) sent as a token is nobody's: resume,
// extend and release leave the key as it is, and acquire does not take it
// for a lock of that token. Before, Resume with a shared key's raw value
// lengthened it and answered yes, and its Release deleted the shared mark.
func TestMarksAreNoTokens(t *testing.T) {
	e := newLineEnv(t)
	if n, err := scripts.AcquireShared.Run(e.ctx, e.rdb, []string{key}, "r1", ttl).Int64(); err != nil || n != 1 {
		t.Fatalf("shared acquire: %d, %v", n, err)
	}
	raw := e.value()
	for _, c := range []struct {
		name string
		run  func() (any, error)
	}{
		{"resume", func() (any, error) { return scripts.Resume.Run(e.ctx, e.rdb, []string{key}, raw, ttl).Result() }},
		{"extend", func() (any, error) { return scripts.Extend.Run(e.ctx, e.rdb, []string{key}, raw, ttl).Result() }},
		{"acquire", func() (any, error) { return scripts.Acquire.Run(e.ctx, e.rdb, []string{key}, raw, ttl).Result() }},
		{"release", func() (any, error) { return scripts.Release.Run(e.ctx, e.rdb, []string{key}, raw, 0).Result() }},
		{"release all", func() (any, error) { return scripts.ReleaseAll.Run(e.ctx, e.rdb, []string{key}, raw, 0).Result() }},
	} {
		got, err := c.run()
		if err != nil || fmt.Sprint(got) != "0" {
			t.Errorf("%s with the shared mark %q as token answered %v, %v; want 0", c.name, raw, got, err)
		}
		if e.value() != raw {
			t.Fatalf("%s with the shared mark as token changed the key to %q", c.name, e.value())
		}
	}
}

// checkBound fails the test if a set of the line holds more than LineMax
// entries after n waiters came.
func (e *lineEnv) checkBound(n int) {
	e.t.Helper()
	for _, set := range []string{line, key + "\x1fx", key + "\x1fg"} {
		if c := e.card(set); c > scripts.LineMax {
			e.t.Fatalf("after %d waiters, %q holds %d entries; the bound is %d", n, set, c, scripts.LineMax)
		}
	}
}

// TestSharedHoldersBounded: a key's shared holders are at most SharedMax;
// a holder beyond them is told "taken", and releases still work, each
// reading the latest lapse in one step however many holders there are.
func TestSharedHoldersBounded(t *testing.T) {
	e := newLineEnv(t)
	for _, s := range []*redis.Script{scripts.AcquireShared, scripts.ReleaseShared} {
		if err := s.Load(e.ctx, e.rdb).Err(); err != nil { // the pipelines send EVALSHA alone
			t.Fatal(err)
		}
	}
	pipe := e.rdb.Pipeline()
	cmds := make([]*redis.Cmd, scripts.SharedMax+100)
	for i := range cmds {
		cmds[i] = scripts.AcquireShared.Run(e.ctx, pipe, []string{key}, fmt.Sprint("r", i), ttl)
	}
	if _, err := pipe.Exec(e.ctx); err != nil {
		t.Fatal(err)
	}
	in := 0
	for _, c := range cmds {
		if n, _ := c.Int64(); n == 1 {
			in++
		}
	}
	if in != scripts.SharedMax || e.card(key+"\x1fr") != scripts.SharedMax {
		t.Fatalf("%d of %d shared acquires joined, the set holds %d; want %d", in, len(cmds), e.card(key+"\x1fr"), scripts.SharedMax)
	}
	release := func(i int) {
		if n, err := scripts.ReleaseShared.Run(e.ctx, e.rdb, []string{key}, fmt.Sprint("r", i), 0).Int64(); err != nil || n != 1 {
			t.Fatalf("release of holder %d answered %d, %v", i, n, err)
		}
	}
	release(0)
	pipe = e.rdb.Pipeline()
	for i := 1; i < scripts.SharedMax-1; i++ {
		scripts.ReleaseShared.Run(e.ctx, pipe, []string{key}, fmt.Sprint("r", i), 0)
	}
	if _, err := pipe.Exec(e.ctx); err != nil {
		t.Fatal(err)
	}
	release(scripts.SharedMax - 1)
	if v := e.value(); v != "" {
		t.Fatalf("the key holds %q after its last shared holder left", v)
	}
}
