package integration

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/redlock"
)

// aclLinePrefix starts the ACL rule line docs/deployments.md gives for the
// library's Redis user; the rules follow the password.
const aclLinePrefix = "ACL SETUSER quorumlock reset on >password "

// documentedACL returns the rules of docs/deployments.md's ACL line, so
// that the test checks the line users copy.
func documentedACL(t *testing.T) []string {
	t.Helper()
	doc, err := os.ReadFile("../docs/deployments.md")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(doc)) {
		if rules, ok := strings.CutPrefix(strings.TrimSpace(line), aclLinePrefix); ok {
			return strings.Fields(rules)
		}
	}
	t.Fatalf("docs/deployments.md has no line beginning %q", aclLinePrefix)
	return nil
}

// TestDocumentedACL creates, on every node, a user with exactly the rules
// of docs/deployments.md and runs the library's operations as that user:
// fenced locks, extends and releases, Locked and Inspect, a Lock woken by a
// release notification, Do (auto-extended), several keys, shared locks, a
// semaphore and an election; the pools' run_id checks get an answer. Then a
// user lacking one command the scripts run fails where that command is
// needed, with an error that names each node's failure, and leaves nothing
// behind: without +incr no fenced lock (unfenced ones still work), without
// +pexpire no extend.
func TestDocumentedACL(t *testing.T) {
	rules := documentedACL(t)
	c := startCluster(t, time.Minute, "")
	dropFenceCounters(t, c)
	admins := c.admins(t)
	ctx := ctxT(t, 60*time.Second)
	lc := aclUser(t, ctx, c, admins, "quorumlock", rules)
	for i, p := range lc.pools {
		if id, err := p.RunID(ctx); id == "" || err != nil {
			t.Errorf("node%d: RunID = %q, %v; want the server's run_id (INFO is granted)", i, id, err)
		}
	}
	aclLocks(t, ctx, lc, admins)
	aclWaitWoken(t, ctx, lc, c.admins(t))
	aclOthers(t, ctx, lc)

	noIncr := aclUser(t, ctx, c, admins, "noincr", without(rules, "+incr"))
	if _, err := noIncr.TryLock(ctx, "acl-noincr", redlock.WithFencing(true)); !refusedEverywhere(t, "without +incr: fenced TryLock", err, redlock.ErrNotAcquired) {
		t.Errorf("without +incr: fenced TryLock = %v", err)
	}
	eventuallyGone(t, admins, "acl-noincr")
	if l, err := noIncr.TryLock(ctx, "acl-noincr"); err != nil {
		t.Errorf("without +incr: unfenced TryLock: %v", err)
	} else if err := l.Release(ctx); err != nil {
		t.Errorf("without +incr: Release: %v", err)
	}

	noPexpire := aclUser(t, ctx, c, admins, "nopexpire", without(rules, "+pexpire"))
	l, err := noPexpire.TryLock(ctx, "acl-nopexpire", redlock.WithTTL(2*time.Second))
	if err != nil {
		t.Fatalf("without +pexpire: TryLock: %v", err)
	}
	// An extend below the key's TTL has nothing to do; a longer one needs
	// PEXPIRE.
	if err := l.Extend(ctx, 30*time.Second); !refusedEverywhere(t, "without +pexpire: Extend", err, redlock.ErrNotHeld) {
		t.Errorf("without +pexpire: Extend = %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Errorf("without +pexpire: Release: %v", err)
	}
	eventuallyGone(t, admins, "acl-nopexpire")
}

// aclUser creates user on every node with exactly rules (password "pw"),
// deleted at the end of the test, and returns a lock client that connects
// as it through pool.Dial (restart guard and eviction check included).
func aclUser(t *testing.T, ctx context.Context, c *cluster, admins []*redis.Client, user string, rules []string) *lockClient {
	t.Helper()
	cmd := append([]any{"ACL", "SETUSER", user, "reset", "on", ">pw"}, anys(rules)...)
	for i, cl := range admins {
		if err := cl.Do(ctx, cmd...).Err(); err != nil {
			t.Fatalf("ACL SETUSER %s on node%d: %v", user, i, err)
		}
	}
	t.Cleanup(func() {
		for _, cl := range admins {
			_ = cl.Do(context.Background(), "ACL", "DELUSER", user).Err()
		}
	})
	return c.newLockClient(t, user, func(i int) *redis.Options {
		return &redis.Options{Addr: c.Node(i).Addr(), Username: user, Password: "pw"}
	}, redlock.WithNodeTimeout(patient))
}

// without returns rules without rule.
func without(rules []string, rule string) []string {
	return slices.DeleteFunc(slices.Clone(rules), func(r string) bool { return r == rule })
}

// refusedEverywhere reports whether err is a failed quorum decided by error
// replies (the ACL refusal; its wording is the server's): enough nodes
// answered with an error to leave no quorum, none agreed, and the rest had
// not answered when the outcome was certain; err matches want. It logs the
// error.
func refusedEverywhere(t *testing.T, what string, err, want error) bool {
	t.Helper()
	var qe *redlock.QuorumError
	if !errors.Is(err, want) || !errors.As(err, &qe) {
		return false
	}
	t.Logf("%s: %v", what, err)
	errs := 0
	for _, n := range qe.Nodes {
		switch n.Outcome {
		case redlock.OutcomeError:
			if n.Err == nil {
				return false
			}
			errs++
		case redlock.OutcomePending, redlock.OutcomeNotAsked:
		default:
			return false
		}
	}
	return errs > len(qe.Nodes)-qe.Quorum
}

// aclLocks: fenced locks with extends and releases, Locked and Inspect.
func aclLocks(t *testing.T, ctx context.Context, lc *lockClient, admins []*redis.Client) {
	t.Helper()
	const key = "acl-lock"
	l, err := lc.TryLock(ctx, key, redlock.WithFencing(true))
	if err != nil {
		t.Fatalf("TryLock: %v", err)
	}
	if l.Fence() == 0 {
		t.Error("fence 0 with fencing on")
	}
	if locked, err := lc.Locked(ctx, key); !locked || err != nil {
		t.Errorf("Locked = %v, %v", locked, err)
	}
	if in, err := lc.Inspect(ctx, key); err != nil || in.Holder != l.Token() {
		t.Errorf("Inspect = %+v, %v; want the holder's token", in, err)
	}
	heldAndReleased(t, ctx, "acl", l)
	eventuallyGone(t, admins, key)
}

// aclWaitWoken: a Lock retrying only every minute, of a key held for a
// minute, is woken by the release notification.
func aclWaitWoken(t *testing.T, ctx context.Context, lc *lockClient, admins []*redis.Client) {
	t.Helper()
	const key = "acl-wait"
	l, err := lc.TryLock(ctx, key, redlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatalf("TryLock: %v", err)
	}
	got := make(chan error, 1)
	go func() {
		w, err := lc.Lock(ctx, key, redlock.WithRetryBackoff(time.Minute, time.Minute))
		if err == nil {
			err = w.Release(context.Background())
		}
		got <- err
	}()
	eventually(t, 10*time.Second, 5*time.Millisecond, "the waiter subscribed to "+rkey(key)+" on every node", func() bool {
		for _, a := range admins {
			n, err := a.PubSubNumSub(context.Background(), rkey(key)).Result()
			if err != nil || n[rkey(key)] < 1 {
				return false
			}
		}
		return true
	})
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Errorf("Lock woken by the release: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the waiting Lock was not woken by the release notification")
	}
}

// aclOthers: Do (auto-extended, through a renewal session), several keys,
// shared locks, a semaphore and an election.
func aclOthers(t *testing.T, ctx context.Context, lc *lockClient) {
	t.Helper()
	if err := lc.Do(ctx, "acl-do", func(context.Context) error { return nil }); err != nil {
		t.Errorf("Do: %v", err)
	}
	if l, err := lc.TryLockAll(ctx, []string{"acl-a", "acl-b"}); err != nil {
		t.Errorf("TryLockAll: %v", err)
	} else if err := l.Release(ctx); err != nil {
		t.Errorf("TryLockAll: Release: %v", err)
	}
	r1, err1 := lc.TryLock(ctx, "acl-shared", redlock.Shared())
	r2, err2 := lc.TryLock(ctx, "acl-shared", redlock.Shared())
	for _, r := range []struct {
		l   *redlock.Lock
		err error
	}{{r1, err1}, {r2, err2}} {
		if r.err != nil {
			t.Errorf("shared TryLock: %v", r.err)
		} else if err := r.l.Release(ctx); err != nil {
			t.Errorf("shared Release: %v", err)
		}
	}
	sem, err := lc.Semaphore("acl-sem", 2)
	if err != nil {
		t.Fatal(err)
	}
	if p, err := sem.TryAcquire(ctx); err != nil {
		t.Errorf("semaphore TryAcquire: %v", err)
	} else if err := p.Release(ctx); err != nil {
		t.Errorf("semaphore Release: %v", err)
	}
	leader, err := lc.Campaign(ctx, "acl-election", "me")
	if err != nil {
		t.Fatalf("Campaign: %v", err)
	}
	if v, term, err := lc.Leader(ctx, "acl-election"); v != "me" || term != leader.Fence() || err != nil {
		t.Errorf("Leader = %q, %d, %v; want \"me\", %d", v, term, err, leader.Fence())
	}
	if err := leader.Release(ctx); err != nil {
		t.Errorf("resign: %v", err)
	}
}
