package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/quorumlock/quorumlock/internal/redisproc"
)

// TestHoldStatusRelease: "hold" in one process, "status" and "release" in
// others, as in two terminals: hold prints the token, status shows the
// holder and its description (exit 0; --json), a release with another token
// is refused (exit 1) and changes nothing, the release with hold's token
// frees the lock (status exit 1), and hold learns that it lost the lock
// (exit 4). A second hold ends with SIGTERM by releasing (exit 0).
func TestHoldStatusRelease(t *testing.T) {
	c := redisproc.Start(t, 5)
	addrs := strings.Join(c.Addrs(), ",")
	const key = "hold-1"
	h := startCLI(t, nil, "hold", nodeTimeout, freshServers, "--addrs", addrs, "--metadata", "terminal 1", key)
	if got := h.waitLine(t, "key "); got != "key "+key {
		t.Fatalf("hold printed %q", got)
	}
	token := strings.TrimPrefix(h.waitLine(t, "token "), "token ")
	if !shellWord.MatchString(token) {
		t.Fatalf("hold's token %s is not one word a shell passes on unquoted", token)
	}
	h.waitLine(t, "fence ")

	st := startCLI(t, nil, "status", nodeTimeout, "--addrs", addrs, key, "--json") // flags may follow KEY
	if code := st.wait(t); code != exitOK {
		t.Fatalf("status of a held lock: exit %d\n%s%s", code, st.stdout.String(), st.stderr.String())
	}
	var js statusJSON
	if err := json.Unmarshal([]byte(st.stdout.String()), &js); err != nil || js.State != "held" || js.Metadata != "terminal 1" || js.Agreed < 3 || len(js.Nodes) != 5 {
		t.Fatalf("status --json: %+v, %v\n%s", js, err, st.stdout.String())
	}

	wrong := startCLI(t, nil, "release", nodeTimeout, freshServers, "--addrs", addrs, key, "not-the-token")
	if code := wrong.wait(t); code != exitFree {
		t.Errorf("release with another token: exit %d, want %d\n%s", code, exitFree, wrong.stderr.String())
	}
	// The whole token as earlier versions of hold printed it, quoted as a
	// Go string, and as a shell passes it pasted: "..." makes the quotes go
	// and leaves \x1d as text.
	pasted := token + `\x1dterminal 1`
	rel := startCLI(t, nil, "release", nodeTimeout, freshServers, "--addrs", addrs, key, pasted)
	if code := rel.wait(t); code != exitOK || !strings.Contains(rel.stdout.String(), "released "+key) {
		t.Fatalf("release with hold's token: exit %d\n%s%s", code, rel.stdout.String(), rel.stderr.String())
	}
	st = startCLI(t, nil, "status", nodeTimeout, "--addrs", addrs, key)
	if code := st.wait(t); code != exitFree {
		t.Errorf("status after the release: exit %d, want %d\n%s", code, exitFree, st.stdout.String())
	}
	if code := h.wait(t); code != exitLost || !strings.Contains(h.stderr.String(), "lost") || !strings.Contains(h.stderr.String(), "released or taken by another process") {
		t.Errorf("hold after its lock was released elsewhere: exit %d, want %d\n%s", code, exitLost, h.stderr.String())
	}

	h2 := startCLI(t, nil, "hold", nodeTimeout, freshServers, "--addrs", addrs, key)
	h2.waitLine(t, "fence ")
	if err := h2.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := h2.wait(t); code != exitOK {
		t.Errorf("hold after SIGTERM: exit %d\n%s", code, h2.stderr.String())
	}
	st = startCLI(t, nil, "status", nodeTimeout, "--addrs", addrs, key)
	if code := st.wait(t); code != exitFree {
		t.Errorf("status after hold released on SIGTERM: exit %d\n%s", code, st.stdout.String())
	}

	// Two names for one server: bad usage, said so, not "unavailable".
	_, port, _ := strings.Cut(c.Addrs()[0], ":")
	twice := addrs + ",localhost:" + port
	st = startCLI(t, nil, "status", nodeTimeout, "--addrs", twice, key)
	if code := st.wait(t); code != exitUsage || !strings.Contains(st.stderr.String(), "reach the same Redis server") ||
		strings.Contains(st.stderr.String(), "give the Client") || !strings.Contains(st.stderr.String(), "once in --addrs") {
		t.Errorf("status with two names for one server: exit %d, want %d\n%s", code, exitUsage, st.stderr.String())
	}
}

// shellWord is a token a shell passes on as it is, unquoted.
var shellWord = regexp.MustCompile(`^[A-Za-z0-9_.:@%+=/-]+$`)

// TestReleaseTokenAsStatusPrints: a lock held with --metadata is released
// with its token exactly as status printed it; hold, status and status
// --json print the token in one form, which a shell passes on unquoted
// (issue 36, major 5).
func TestReleaseTokenAsStatusPrints(t *testing.T) {
	c := redisproc.Start(t, 3)
	addrs := strings.Join(c.Addrs(), ",")
	const key = "hold-meta"
	h := startCLI(t, nil, "hold", nodeTimeout, freshServers, "--addrs", addrs, "--metadata", "deploy by \"ann\"", key)
	held := strings.TrimPrefix(h.waitLine(t, "token "), "token ")
	h.waitLine(t, "fence ")
	st := startCLI(t, nil, "status", nodeTimeout, "--addrs", addrs, key)
	if code := st.wait(t); code != exitOK {
		t.Fatalf("status: exit %d\n%s%s", code, st.stdout.String(), st.stderr.String())
	}
	m := regexp.MustCompile(`(?m)^held: token (\S+) on `).FindStringSubmatch(st.stdout.String())
	if m == nil {
		t.Fatalf("status shows no token:\n%s", st.stdout.String())
	}
	token := m[1]
	js := startCLI(t, nil, "status", nodeTimeout, "--json", "--addrs", addrs, key)
	js.wait(t)
	var out statusJSON
	if err := json.Unmarshal([]byte(js.stdout.String()), &out); err != nil {
		t.Fatal(err)
	}
	if !shellWord.MatchString(token) || held != token || out.Holder != token || !strings.Contains(st.stdout.String(), "  "+token+"  ") {
		t.Errorf("the token in one form a shell can paste: hold %q, status %q, status --json %q, table:\n%s", held, token, out.Holder, st.stdout.String())
	}
	rel := startCLI(t, nil, "release", nodeTimeout, freshServers, "--addrs", addrs, key, token)
	if code := rel.wait(t); code != exitOK || !strings.Contains(rel.stdout.String(), "released "+key) {
		t.Fatalf("release with the token as status printed it (%s): exit %d\n%s%s", token, code, rel.stdout.String(), rel.stderr.String())
	}
	if code := h.wait(t); code != exitLost {
		t.Errorf("hold after its lock was released elsewhere: exit %d, want %d\n%s", code, exitLost, h.stderr.String())
	}
}
