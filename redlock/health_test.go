package redlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/testlog"
	"github.com/quorumlock/quorumlock/pool"
)

// TestNodeOutageLoggedOnce: a node that fails every command is logged once
// when it begins failing and once when it answers again, with the failures
// in between counted, however many operations ran.
func TestNodeOutageLoggedOnce(t *testing.T) {
	e := newEnv(t, 3)
	var buf testlog.Buffer
	c := e.client(WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
	ctx := context.Background()
	e.nodes[2].fault.setErr(errors.New("connection refused"))
	for i := range 40 {
		l, err := c.TryLock(ctx, fmt.Sprintf("k%d", i))
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	out := buf.String()
	if n := strings.Count(out, "node2 unreachable since"); n != 1 {
		t.Fatalf("the outage of node2 was logged %d times, want once:\n%s", n, out)
	}
	if strings.Contains(out, "0 shorter outages") {
		t.Fatalf("the first outage's line counts the unlogged outages before it, which were none:\n%s", out)
	}
	e.nodes[2].fault.setErr(nil)
	// Rounds decided before node2 answered do not see its answer; the
	// releases the Client sends again in the background do, within about
	// a second (maxRecheck).
	for i := 0; i < 200 && !strings.Contains(buf.String(), "node2 answers again after"); i++ {
		l, err := c.TryLock(ctx, fmt.Sprintf("after%d", i))
		if err != nil {
			t.Fatal(err)
		}
		_ = l.Release(ctx)
		time.Sleep(25 * time.Millisecond)
	}
	out = buf.String()
	if !strings.Contains(out, "node2 answers again after") || strings.Count(out, "level=") != 2 {
		t.Fatalf("want one warning and one \"answers again\", got:\n%s", out)
	}
	if !strings.Contains(out, "failed_commands=") || strings.Contains(out, "failed_commands=0") {
		t.Fatalf("the recovery line lacks the count of failed commands:\n%s", out)
	}
}

// TestFlappingNodeLogsOnce: a node that fails for some operations and
// answers the next (a Cluster pool with one shard's master gone) logs one
// outage and its end per outageEvery, not a pair of lines per flap (the
// second review: 14 pairs in 100 operations).
func TestFlappingNodeLogsOnce(t *testing.T) {
	e := newEnv(t, 3)
	var buf testlog.Buffer
	c := e.client(WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
	ctx := context.Background()
	for i := range 50 {
		if i%2 == 0 {
			e.nodes[2].fault.setErr(errConnRefused)
		}
		l, err := c.TryLock(ctx, fmt.Sprintf("flap%d", i))
		e.nodes[2].fault.setErr(nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		e.waitGone(rkey(fmt.Sprintf("flap%d", i))) // node2 answered the release
	}
	out := buf.String()
	if strings.Count(out, "node2 unreachable since") != 1 || strings.Count(out, "node2 answers again") != 1 {
		t.Fatalf("25 outages of node2 in a row, want one outage and one recovery logged:\n%s", out)
	}
}

// TestStalledNodeSeenLate: a node that stops answering while the others
// decide every round is still logged as unreachable (its commands time
// out after the rounds ended), and its answers after that log its
// recovery, though no round waits for them.
func TestStalledNodeSeenLate(t *testing.T) {
	e := newEnv(t, 5)
	var buf testlog.Buffer
	c := e.client(WithLogger(slog.New(slog.NewTextHandler(&buf, nil))), WithNodeTimeout(100*time.Millisecond))
	ctx := context.Background()
	verifyAll(t, c)
	e.nodes[4].fault.hold(false, "acquire", "release")
	cycle := func(k string) {
		l, err := c.TryLock(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; !strings.Contains(buf.String(), "node4 unreachable since"); i++ {
		if i == 200 {
			t.Fatalf("node4 stalled for 200 operations and nothing was logged:\n%s", buf.String())
		}
		cycle(fmt.Sprintf("stall%d", i))
		time.Sleep(10 * time.Millisecond)
	}
	e.nodes[4].fault.open()
	for i := 0; !strings.Contains(buf.String(), "node4 answers again"); i++ {
		if i == 200 {
			t.Fatalf("node4 answers again, and its recovery was not logged:\n%s", buf.String())
		}
		cycle(fmt.Sprintf("back%d", i))
		time.Sleep(10 * time.Millisecond)
	}
}

func TestNoLoggerNoHealth(t *testing.T) {
	c := newEnv(t, 3).client()
	if c.health != nil {
		t.Fatal("a Client without WithLogger keeps a health log")
	}
}

// TestNodeRefusingOneKeyIsNoOutage: an error reply on one key (WRONGTYPE)
// of a node that answers everything else is logged once, not as an outage
// that every other answer ends (found by the adversarial review: it
// flapped once per cycle).
func TestNodeRefusingOneKeyIsNoOutage(t *testing.T) {
	e := newEnv(t, 3)
	var buf testlog.Buffer
	c := e.client(WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
	ctx := context.Background()
	if _, err := e.nodes[2].m.Lpush(rkey("bad"), "x"); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		for _, k := range []string{"bad", fmt.Sprintf("good%d", i)} {
			l, err := c.TryLock(ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			_ = l.Release(ctx)
		}
	}
	out := buf.String()
	if strings.Contains(out, "unreachable") || strings.Contains(out, "answers again") || strings.Count(out, "refuses a lock command") > 1 {
		t.Fatalf("a key of the wrong type on node2 logged:\n%s", out)
	}
}

// TestCallersShortDeadlineIsNoOutage: rounds cut short by callers'
// deadlines (commands never written) do not log healthy nodes as
// unreachable, and are not ErrUnavailable (found by the adversarial
// review).
func TestCallersShortDeadlineIsNoOutage(t *testing.T) {
	var buf testlog.Buffer
	c := newEnv(t, 3).scriptClient(WithLogger(slog.New(slog.NewTextHandler(&buf, nil)))) // queued Pools: commands can miss their deadline in the queue
	held, err := c.TryLock(context.Background(), "held")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(context.Background())
	for i := range 300 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(20+i%80)*time.Microsecond)
		_, err := c.TryLock(ctx, "held")
		cancel()
		if errors.Is(err, ErrUnavailable) {
			t.Fatalf("a TryLock of a held key on healthy nodes, cut by its caller's deadline: %v", err)
		}
	}
	if out := buf.String(); strings.Contains(out, "unreachable since") {
		t.Fatalf("healthy nodes logged unreachable after callers' short deadlines:\n%s", out)
	}
}

// TestRestartGuardIsNoOutage: a node its Pool keeps out of votes (the
// restart guard's refusal) answers: it is logged once as kept out, not as
// unreachable, and not as "answers again" once the guard lets it vote
// (issue 36: the command line said "answers again after 28s unreachable"
// of nodes that had only just started).
func TestRestartGuardIsNoOutage(t *testing.T) {
	e := newEnv(t, 3)
	var buf testlog.Buffer
	c := e.client(WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
	ctx := context.Background()
	e.nodes[2].fault.setErr(&pool.RestartError{Pool: "node2", RunID: "r", Uptime: time.Second, Guard: 30 * time.Second})
	for i := range 10 {
		l, err := c.TryLock(ctx, fmt.Sprintf("k%d", i))
		if err != nil {
			t.Fatal(err)
		}
		_ = l.Release(ctx)
	}
	e.nodes[2].fault.setErr(nil)
	for i := range 10 {
		l, err := c.TryLock(ctx, fmt.Sprintf("after%d", i))
		if err != nil {
			t.Fatal(err)
		}
		_ = l.Release(ctx)
	}
	out := buf.String()
	if strings.Contains(out, "unreachable") || strings.Contains(out, "answers again") || strings.Count(out, "node2 is kept out of votes") != 1 {
		t.Fatalf("want one line that node2 is kept out of votes, and no outage; got:\n%s", out)
	}
}
