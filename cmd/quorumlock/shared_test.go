package main

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/quorumlock/quorumlock/internal/redisproc"
)

// TestExecShared: two exec --shared commands hold one key at once, status
// shows both, release refuses the key's raw value as a token, a holder of the key alone waits for them, and --shared with
// --fencing is a usage error.
func TestExecShared(t *testing.T) {
	c := redisproc.Start(t, 3)
	env := []string{envAddrs + "=" + strings.Join(c.Addrs(), ",")}
	const key = "exec-shared"
	reader := func(name string) *proc {
		return startCLI(t, env, "exec", nodeTimeout, freshServers, "--shared", "--metadata", name, key, "--",
			"sh", "-c", `echo "ready $QUORUMLOCK_FENCE"; read line`)
	}
	r1, r2 := reader("reader-1"), reader("reader-2")
	for _, r := range []*proc{r1, r2} {
		if line := r.waitLine(t, "ready "); line != "ready 0" {
			t.Fatalf("a shared holder's environment: %q, want no fencing token", line)
		}
	}
	st := startCLI(t, env, "status", nodeTimeout, "--json", key)
	if code := st.wait(t); code != 0 {
		t.Fatalf("status of a shared key: exit %d\n%s%s", code, st.stdout.String(), st.stderr.String())
	}
	var out statusJSON
	if err := json.Unmarshal([]byte(st.stdout.String()), &out); err != nil {
		t.Fatal(err)
	}
	if out.State != "held" || out.Holder != "" || len(out.Shared) != 2 || len(out.Nodes[0].Shared) == 0 {
		t.Fatalf("status --json of a shared key:\n%s", st.stdout.String())
	}
	text := startCLI(t, env, "status", nodeTimeout, key)
	if code := text.wait(t); code != 0 || !strings.Contains(text.stdout.String(), "held shared: 2 holders") || !strings.Contains(text.stdout.String(), `"reader-1"`) {
		t.Fatalf("status of a shared key: exit %d\n%s", code, text.stdout.String())
	}
	// The key's value as redis-cli prints it is no token: release refuses
	// it, and the key stays shared (issue 31, defect 1).
	raw, err := c.Clients(t)[0].Get(t.Context(), "quorumlock:{"+key+"}").Result()
	if err != nil {
		t.Fatal(err)
	}
	rel := startCLI(t, env, "release", nodeTimeout, freshServers, key, strconv.Quote(raw))
	if code := rel.wait(t); code == 0 || !strings.Contains(rel.stderr.String(), "no lock's token has") {
		t.Fatalf("release with the shared key's value %q: exit %d, want a refusal of the token\n%s%s", raw, code, rel.stdout.String(), rel.stderr.String())
	}
	alone := startCLI(t, env, "exec", nodeTimeout, freshServers, key, "--", "echo", "alone")
	if code := alone.wait(t); code != exitNotAcquired || strings.Contains(alone.stdout.String(), "alone") {
		t.Fatalf("exec of the key alone while shared: exit %d\n%s", code, alone.stdout.String())
	}
	waiter := startCLI(t, env, "exec", nodeTimeout, freshServers, "--wait", "1m", key, "--", "echo", "alone")
	for _, r := range []*proc{r1, r2} {
		_, _ = r.stdin.Write([]byte("done\n"))
		if code := r.wait(t); code != 0 {
			t.Fatalf("a shared holder: exit %d\n%s", code, r.stderr.String())
		}
	}
	if code := waiter.wait(t); code != 0 || !strings.Contains(waiter.stdout.String(), "alone") {
		t.Fatalf("the holder of the key alone, after the shared ones: exit %d\n%s%s", code, waiter.stdout.String(), waiter.stderr.String())
	}
	bad := startCLI(t, env, "exec", "--shared", "--fencing", key, "--", "true")
	if code := bad.wait(t); code != exitUsage || !strings.Contains(bad.stderr.String(), "--shared with --fencing") {
		t.Fatalf("--shared --fencing: exit %d\n%s", code, bad.stderr.String())
	}
}

// TestPlural: status counts one shared holder as "1 holder" (it said
// "1 holders").
func TestPlural(t *testing.T) {
	for n, want := range map[int]string{0: "0 holders", 1: "1 holder", 2: "2 holders"} {
		if got := plural(n, "holder"); got != want {
			t.Errorf("plural(%d) = %q, want %q", n, got, want)
		}
	}
}
