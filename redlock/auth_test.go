package redlock

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/testlog"
	"github.com/quorumlock/quorumlock/internal/testwait"
	"github.com/quorumlock/quorumlock/pool"
)

// authReplies are the error replies of a server that refuses a client's
// credentials or rights, and what the error must say for each.
var authReplies = []struct{ reply, says string }{
	{"WRONGPASS invalid username-password pair or user is disabled.", "wrong password or user"},
	{"NOAUTH Authentication required.", "authentication required"},
	{"ERR Protocol error: unauthenticated multibulk length", "authentication required"},
	{"NOPERM User quorumlock has no permissions to run the 'evalsha' command", "permission denied"},
	{"ERR The user executing the script can't run this command or subcommand script: 2af7848a, on @user_script:173.", "permission denied"},
}

// TestAuthRefusedByQuorum: when a quorum of nodes refuses the Client's
// credentials or rights, Lock, Do and a semaphore's Acquire return at once,
// even with a context that never ends, with an error that matches ErrAuth
// and ErrNotAcquired, names the refusing nodes and says what the refusal
// means.
func TestAuthRefusedByQuorum(t *testing.T) {
	for _, a := range authReplies {
		t.Run(a.says+" "+strings.Fields(a.reply)[0], func(t *testing.T) {
			e := newEnv(t, 5)
			for i := range 3 {
				e.nodes[i].m.SetError(a.reply)
			}
			c := e.client()
			raw := make([]pool.Pool, len(e.nodes)) // a semaphore needs Pools of package pool
			for i, n := range e.nodes {
				raw[i] = n.fault.Pool
			}
			sc, err := New(raw, testNodeTimeout)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = sc.Close() })
			sem, err := sc.Semaphore("sem", 2)
			if err != nil {
				t.Fatal(err)
			}
			// A key of its own each: the SETs a refused call won on nodes 3
			// and 4 are rolled back in the background, and a call that found
			// one still there (taken) decided its round before a third refusal
			// came (seen once in make test: "node3 taken").
			calls := map[string]func(context.Context) error{
				"TryLock": func(ctx context.Context) error { _, err := c.TryLock(ctx, "k-try"); return err },
				"Lock":    func(ctx context.Context) error { _, err := c.Lock(ctx, "k-lock"); return err },
				"Do": func(ctx context.Context) error {
					return c.Do(ctx, "k-do", func(context.Context) error { return nil })
				},
				"Acquire": func(ctx context.Context) error { _, err := sem.Acquire(ctx); return err },
			}
			for name, call := range calls {
				err := testwait.ReturnsWithin(t, 5*time.Second, "it retries a refusal", call)
				if !errors.Is(err, ErrAuth) || !errors.Is(err, ErrNotAcquired) || errors.Is(err, ErrUnavailable) {
					t.Fatalf("%s = %v, want an error matching ErrAuth and ErrNotAcquired, not ErrUnavailable (the nodes answered)", name, err)
				}
				msg := err.Error()
				t.Logf("%s: %s", name, msg)
				for _, want := range []string{"node0", "node1", "node2", a.says, strings.Fields(a.reply)[0]} {
					if !strings.Contains(msg, want) {
						t.Errorf("%s: error does not say %q: %s", name, want, msg)
					}
				}
			}
		})
	}
}

// TestAuthRefusedByMinority: a refusal by fewer nodes than would keep a
// quorum from being possible is no error: the lock works on the others,
// and each refusing node is logged once, without the claim that a key it
// never wrote expires.
func TestAuthRefusedByMinority(t *testing.T) {
	e := newEnv(t, 5)
	e.nodes[3].m.SetError(authReplies[0].reply)
	e.nodes[4].m.SetError(authReplies[3].reply)
	var buf testlog.Buffer
	c := e.client(WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
	ctx := context.Background()
	for i := range 6 {
		if i == 3 { // another refusal of the same node: still one line
			e.nodes[4].m.SetError(authReplies[2].reply)
		}
		l, err := c.Lock(ctx, "k")
		if err != nil {
			t.Fatalf("Lock with two refusing nodes of five: %v", err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
	}
	// Replies after a round's decision are logged as they arrive.
	for end := time.Now().Add(5 * time.Second); strings.Count(buf.String(), "refuses this Client") < 2 && time.Now().Before(end); {
		time.Sleep(time.Millisecond)
	}
	out := buf.String()
	for _, want := range []string{"node3 refuses this Client: wrong password or user", "node4 refuses this Client: permission denied"} {
		if n := strings.Count(out, want); n != 1 {
			t.Errorf("%q logged %d times, want once:\n%s", want, n, out)
		}
	}
	if n := strings.Count(out, "node4 refuses"); n != 1 {
		t.Errorf("node4's refusals logged %d times, want once:\n%s", n, out)
	}
	if strings.Contains(out, "expires with its TTL") {
		t.Errorf("the log says a key expires where none was written:\n%s", out)
	}
}
