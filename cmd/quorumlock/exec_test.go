package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	wire "github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/internal/redisproc"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redlock"
)

// nodeTimeout is given to every command: the test machine may be loaded,
// and the servers are reached through Docker's port proxy.
const nodeTimeout = "--node-timeout=1s"

// freshServers turns the restart guard off for tests whose servers have
// just started: exec's strict guard would refuse them all for 30 s
// (TestExecRefusesAmnesiacMasters tests the guard).
const freshServers = "--restart-guard=0"

// bound is how long a test waits for something that should happen: long,
// because the machine may be busy; reaching it fails the test.
const bound = 60 * time.Second

// TestExec runs quorumlock exec and status as real processes against 5 real
// Redis servers. The subtests share the servers; the last one kills three.
func TestExec(t *testing.T) {
	c := redisproc.Start(t, 5)
	addrs := strings.Join(c.Addrs(), ",")
	admins := c.Clients(t)
	// tokens returns the value of the lock key on every node ("" if absent
	// or the node does not answer).
	tokens := func(key string) []string {
		out := make([]string, len(admins))
		for i, cl := range admins {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			out[i], _ = cl.Get(ctx, redlock.DefaultKeyPrefix+"{"+key+"}").Result()
			cancel()
		}
		return out
	}
	// released checks that the lock is free: no token is on a quorum. (A
	// token of an attempt that failed may stay on a node that answered too
	// late for its clean-up; it expires with its TTL, and does not keep the
	// lock from others.)
	released := func(t *testing.T, key string) {
		t.Helper()
		count := map[string]int{}
		for _, tok := range tokens(key) {
			if count[tok]++; tok != "" && count[tok] >= 3 {
				t.Errorf("lock %q still held after quorumlock exited: %q", key, tokens(key))
				return
			}
		}
	}

	t.Run("runs the command under the lock and releases it", func(t *testing.T) {
		const key = "exec-runs"
		p := startCLI(t, []string{envAddrs + "=" + addrs}, "exec", nodeTimeout, freshServers, key, "--ttl", "5s", "--metadata", "ci-job-7", "--", // flags may follow KEY
			"sh", "-c", `echo "ready $QUORUMLOCK_KEY $QUORUMLOCK_TOKEN $QUORUMLOCK_FENCE"; read line; echo "got $line"; exit 7`)
		f := strings.Fields(p.waitLine(t, "ready "))
		if len(f) != 4 || f[1] != key || f[2] == "" {
			t.Fatalf("the command's environment: %q, want key %q, a token and a fence", f, key)
		}
		token := f[2]
		if !strings.HasSuffix(token, "\x1dci-job-7") {
			t.Errorf("QUORUMLOCK_TOKEN=%q does not carry the --metadata", token)
		}
		if fence, err := strconv.ParseUint(f[3], 10, 64); err != nil || fence == 0 {
			t.Errorf("QUORUMLOCK_FENCE=%q, want a positive fencing token", f[3])
		}
		// While the command runs, the token is on the nodes...
		held := 0
		for _, tok := range tokens(key) {
			if tok == token {
				held++
			}
		}
		if held < 3 {
			t.Errorf("the command runs, but its token is on %d nodes: %q", held, tokens(key))
		}
		// ...status shows it...
		st := startCLI(t, []string{envAddrs + "=" + addrs}, "status", nodeTimeout, key)
		if code := st.wait(t); code != 0 {
			t.Errorf("status: exit %d\n%s", code, st.stderr.String())
		}
		// A quorum, at least: the round is decided at 3, and the other
		// nodes' replies may still be on their way.
		own, _, _ := strings.Cut(token, "\x1d")
		if !regexp.MustCompile(`held: token ` + regexp.QuoteMeta(own) + ` on [345] of 5 nodes, by "ci-job-7"`).MatchString(st.stdout.String()) {
			t.Errorf("status does not show the lock held by %s:\n%s", own, st.stdout.String())
		}
		for _, want := range c.Addrs() {
			if !strings.Contains(st.stdout.String(), want) {
				t.Errorf("status lacks %q:\n%s", want, st.stdout.String())
			}
		}
		// ...and nobody else gets the lock: the second command never runs.
		other := startCLI(t, nil, "exec", nodeTimeout, freshServers, "--addrs", addrs, key, "--", "sh", "-c", "echo second")
		if code := other.wait(t); code != exitNotAcquired {
			t.Errorf("second exec on a held key: exit %d, want %d\n%s", code, exitNotAcquired, other.stderr.String())
		}
		if strings.Contains(other.stdout.String(), "second") {
			t.Error("the second command ran while the lock was held")
		}
		if !strings.Contains(other.stderr.String(), "not acquired") {
			t.Errorf("second exec: stderr does not say why: %s", other.stderr.String())
		}

		if _, err := io.WriteString(p.stdin, "hello\n"); err != nil {
			t.Fatal(err)
		}
		p.waitLine(t, "got hello") // stdin reaches the command
		if code := p.wait(t); code != 7 {
			t.Errorf("exit %d, want the command's 7\n%s", code, p.stderr.String())
		}
		for i, tok := range tokens(key) {
			if tok == token {
				t.Errorf("node %d still holds the token after quorumlock exited", i)
			}
		}
		st = startCLI(t, nil, "status", nodeTimeout, "--addrs", addrs, key)
		if code := st.wait(t); code != exitFree || !strings.Contains(st.stdout.String(), "free:") {
			t.Errorf("status after exit: %d\n%s", code, st.stdout.String())
		}
	})

	t.Run("concurrent commands on one key never overlap", func(t *testing.T) {
		const key, n = "exec-overlap", 5
		file := filepath.Join(t.TempDir(), "log")
		procs := make([]*proc, n)
		for i := range procs {
			procs[i] = startCLI(t, nil, "exec", nodeTimeout, freshServers, "--addrs", addrs, "--wait", "50s", key, "--", "sh", "-c",
				`echo "start $1 $QUORUMLOCK_FENCE" >> "$2"; sleep 0.1; echo "end $1 $QUORUMLOCK_FENCE" >> "$2"`, "sh", strconv.Itoa(i), file)
		}
		for i, p := range procs {
			if code := p.wait(t); code != 0 {
				t.Errorf("exec %d: exit %d\n%s", i, code, p.stderr.String())
			}
		}
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		if len(lines) != 2*n {
			t.Fatalf("%d lines, want %d:\n%s", len(lines), 2*n, data)
		}
		seen := map[string]bool{}
		var lastFence uint64
		for j := 0; j < len(lines); j += 2 {
			start, end := strings.Fields(lines[j]), strings.Fields(lines[j+1])
			if len(start) != 3 || len(end) != 3 || start[0] != "start" || end[0] != "end" || start[1] != end[1] || start[2] != end[2] {
				t.Fatalf("lines %d and %d interleave: %q, %q\n%s", j+1, j+2, lines[j], lines[j+1], data)
			}
			seen[start[1]] = true
			fence, _ := strconv.ParseUint(start[2], 10, 64)
			if fence <= lastFence {
				t.Errorf("fencing token %d after %d: not increasing\n%s", fence, lastFence, data)
			}
			lastFence = fence
		}
		if len(seen) != n {
			t.Errorf("%d distinct commands ran, want %d\n%s", len(seen), n, data)
		}
		released(t, key)
	})

	t.Run("signals reach the command", func(t *testing.T) {
		const key = "exec-signals"
		p := startCLI(t, nil, "exec", nodeTimeout, freshServers, "--addrs", addrs, key, "--", "sh", "-c",
			`trap 'echo got USR1' USR1; trap 'echo got HUP' HUP; trap 'echo got TERM; exit 9' TERM; echo "ready $$"; while :; do sleep 0.05; done`)
		p.waitLine(t, "ready ")
		for _, s := range []struct {
			sig  syscall.Signal
			line string
		}{{syscall.SIGUSR1, "got USR1"}, {syscall.SIGHUP, "got HUP"}, {syscall.SIGTERM, "got TERM"}} {
			if err := p.cmd.Process.Signal(s.sig); err != nil {
				t.Fatal(err)
			}
			p.waitLine(t, s.line)
		}
		if code := p.wait(t); code != 9 {
			t.Errorf("exit %d, want the command's 9\n%s", code, p.stderr.String())
		}
		released(t, key)
	})

	t.Run("exit statuses", func(t *testing.T) {
		hold := holdLock(t, c.Addrs(), "exec-held")
		defer hold()
		notExecutable := filepath.Join(t.TempDir(), "script")
		if err := os.WriteFile(notExecutable, []byte("#!/bin/sh\necho ran\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name   string
			args   []string
			code   int
			stderr string // part of what quorumlock says on stderr
		}{
			{"the command's status", []string{"exec-status", "--", "sh", "-c", "exit 42"}, 42, ""},
			{"killed by a signal", []string{"exec-status", "--", "sh", "-c", "kill -KILL $$"}, 128 + 9, ""},
			{"bad usage", []string{"--ttl", "forever", "exec-status", "--", "true"}, exitUsage, "invalid value"},
			{"not acquired", []string{"exec-held", "--", "sh", "-c", "echo ran"}, exitNotAcquired, `lock "exec-held" not acquired: another holder has it (use --wait`},
			{"not acquired within --wait", []string{"--wait", "300ms", "exec-held", "--", "sh", "-c", "echo ran"}, exitNotAcquired, "waited 300ms"},
			{"command not found", []string{"exec-status", "--", "no-such-command-quorumlock"}, exitNotFound, "cannot run no-such-command-quorumlock"},
			{"command not executable", []string{"exec-status", "--", notExecutable}, exitCannotRun, "cannot run " + notExecutable},
		} {
			p := startCLI(t, nil, append([]string{"exec", nodeTimeout, freshServers, "--addrs", addrs}, tc.args...)...)
			code := p.wait(t)
			if code != tc.code {
				t.Errorf("%s: exit %d, want %d\n%s", tc.name, code, tc.code, p.stderr.String())
			}
			if !strings.Contains(p.stderr.String(), tc.stderr) {
				t.Errorf("%s: stderr lacks %q:\n%s", tc.name, tc.stderr, p.stderr.String())
			}
			if goName := goNames.FindString(p.stderr.String()); goName != "" {
				t.Errorf("%s: stderr names the library's %s, not the command's flag:\n%s", tc.name, goName, p.stderr.String())
			}
			if strings.Contains(p.stdout.String(), "ran") {
				t.Errorf("%s: the command ran", tc.name)
			}
		}
		released(t, "exec-status")

		// A signal while waiting for the lock stops the wait; the command
		// never starts.
		p := startCLI(t, nil, "exec", nodeTimeout, freshServers, "--addrs", addrs, "--wait", "50s", "exec-held", "--", "sh", "-c", "echo ran")
		waitDialing(t, p.cmd.Process.Pid)
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code := p.wait(t); code != 128+int(syscall.SIGTERM) {
			t.Errorf("SIGTERM while waiting: exit %d, want %d\n%s", code, 128+int(syscall.SIGTERM), p.stderr.String())
		}
		if !strings.Contains(p.stderr.String(), "got SIGTERM while waiting") || strings.Contains(p.stdout.String(), "ran") {
			t.Errorf("SIGTERM while waiting: stdout %q, stderr %q", p.stdout.String(), p.stderr.String())
		}
	})

	t.Run("terminal", func(t *testing.T) { testTerminal(t, addrs, released) })

	t.Run("losing the lock terminates the command", func(t *testing.T) {
		// One command leaves on SIGTERM, the other ignores it and gets
		// SIGKILL after --grace; the lock's TTL is short, so that the loss
		// comes soon after the nodes die (within the TTL).
		polite := startCLI(t, nil, "exec", nodeTimeout, freshServers, "--addrs", addrs, "--ttl", "3s", "--grace", "30s", "exec-lost-1", "--", "sh", "-c",
			`trap 'echo got TERM; exit 0' TERM; echo "ready $$"; while :; do sleep 0.05; done`)
		stubborn := startCLI(t, nil, "exec", nodeTimeout, freshServers, "--addrs", addrs, "--ttl", "3s", "--grace", "300ms", "exec-lost-2", "--", "sh", "-c",
			`trap '' TERM; echo "ready $$"; while :; do sleep 0.05; done`)
		politePID, _ := strconv.Atoi(strings.Fields(polite.waitLine(t, "ready "))[1])
		stubbornPID, _ := strconv.Atoi(strings.Fields(stubborn.waitLine(t, "ready "))[1])

		kills := make([]error, 3)
		var g sync.WaitGroup
		for i := range kills {
			g.Go(func() { kills[i] = c.Node(i).Kill() })
		}
		if g.Wait(); errors.Join(kills...) != nil {
			t.Fatal(errors.Join(kills...))
		}
		for _, p := range []*proc{polite, stubborn} {
			if code := p.wait(t); code != exitLost {
				t.Errorf("exit %d, want %d (lock lost)\n%s", code, exitLost, p.stderr.String())
			}
			if !strings.Contains(p.stderr.String(), "lost") {
				t.Errorf("stderr does not say the lock was lost:\n%s", p.stderr.String())
			}
		}
		polite.waitLine(t, "got TERM")
		if !strings.Contains(stubborn.stderr.String(), "sending SIGKILL") {
			t.Errorf("the command that ignores SIGTERM was not sent SIGKILL:\n%s", stubborn.stderr.String())
		}
		for _, pgid := range []int{politePID, stubbornPID} {
			if left := groupMembers(pgid); len(left) > 0 {
				t.Errorf("processes %v of the command's group %d still run after the lock was lost", left, pgid)
			}
		}

		// With 3 of 5 nodes down, no lock can be taken and status cannot tell.
		p := startCLI(t, nil, "exec", nodeTimeout, freshServers, "--addrs", addrs, "exec-down", "--", "sh", "-c", "echo ran")
		if code := p.wait(t); code != exitUnavailable {
			t.Errorf("exec with 3 of 5 nodes down: exit %d, want %d\n%s", code, exitUnavailable, p.stderr.String())
		}
		if strings.Contains(p.stdout.String(), "ran") {
			t.Error("the command ran without the lock")
		}
		for i := range 3 {
			if !strings.Contains(p.stderr.String(), c.Node(i).Addr()) {
				t.Errorf("the error does not name the dead node %s:\n%s", c.Node(i).Addr(), p.stderr.String())
			}
		}
		st := startCLI(t, nil, "status", nodeTimeout, "--addrs", addrs, "exec-down")
		if code := st.wait(t); code != exitUnavailable {
			t.Errorf("status with 3 of 5 nodes down: exit %d, want %d", code, exitUnavailable)
		}
		if got := strings.Count(st.stdout.String(), " no "); got != 3 {
			t.Errorf("status marks %d nodes unreachable, want 3:\n%s", got, st.stdout.String())
		}
	})
}

// proc is a quorumlock process started by a test.
type proc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *lineWriter
	stderr *lineWriter
	done   chan struct{} // closed once the process has exited
}

// startCLI starts the test binary as "quorumlock args..." with env added to
// the test's environment (QUORUMLOCK_ADDRS removed). A cleanup kills it if
// the test ends before it exits.
func startCLI(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, envAddrs+"=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(append(cmd.Env, envBeCLI+"=1"), env...)
	p := &proc{cmd: cmd, stdout: newLineWriter(), stderr: newLineWriter(), done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.stdout, p.stderr
	cmd.WaitDelay = 5 * time.Second // stray grandchildren must not hold the output open
	var err error
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
			return
		default:
		}
		// SIGTERM reaches the command through quorumlock, which releases
		// the lock; SIGKILL if that takes too long.
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// wait waits for the process to exit and returns its exit status.
func (p *proc) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(bound):
		t.Fatalf("quorumlock %q still runs after %v\nstdout:\n%s\nstderr:\n%s", p.cmd.Args[1:], bound, p.stdout.String(), p.stderr.String())
		return 0
	}
}

// waitLine waits for a line of stdout that starts with prefix, and returns
// it. It fails the test when the process exits without printing one.
func (p *proc) waitLine(t *testing.T, prefix string) string {
	t.Helper()
	timeout := time.After(bound)
	exited := p.done
	for {
		select {
		case line := <-p.stdout.lines:
			if strings.HasPrefix(line, prefix) {
				return line
			}
			continue
		default:
		}
		if exited == nil { // exited, and every line it wrote has been read
			t.Fatalf("quorumlock %q exited (status %d) without a line %q\nstdout:\n%s\nstderr:\n%s", p.cmd.Args[1:], p.cmd.ProcessState.ExitCode(), prefix, p.stdout.String(), p.stderr.String())
		}
		select {
		case line := <-p.stdout.lines:
			if strings.HasPrefix(line, prefix) {
				return line
			}
		case <-exited:
			exited = nil // Wait has returned: all output is in
		case <-timeout:
			t.Fatalf("no line %q on stdout of %q within %v\nstdout:\n%s\nstderr:\n%s", prefix, p.cmd.Args[1:], bound, p.stdout.String(), p.stderr.String())
		}
	}
}

// lineWriter keeps everything written to it, and hands out complete lines.
type lineWriter struct {
	mu      sync.Mutex
	all     bytes.Buffer
	partial []byte
	lines   chan string
}

func newLineWriter() *lineWriter { return &lineWriter{lines: make(chan string, 10000)} }

func (w *lineWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.all.Write(b)
	w.partial = append(w.partial, b...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			return len(b), nil
		}
		select {
		case w.lines <- string(bytes.TrimRight(w.partial[:i], "\r")):
		default: // nobody is reading this many lines
		}
		w.partial = w.partial[i+1:]
	}
}

func (w *lineWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.all.String()
}

// holdLock takes key on the nodes with the library and returns the function
// that releases it.
func holdLock(t *testing.T, addrs []string, key string) (release func()) {
	t.Helper()
	pools := make([]pool.Pool, len(addrs))
	for i, a := range addrs {
		p, err := pool.Dial(&redis.Options{Addr: a})
		if err != nil {
			t.Fatal(err)
		}
		pools[i] = p
	}
	client, err := redlock.New(pools, redlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	l, err := client.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := l.Release(context.Background()); err != nil {
			t.Errorf("releasing %q: %v", key, err)
		}
		_ = client.Close()
		closePools(pools)
	}
}

// waitDialing waits until process pid has a socket open: it is talking to
// the nodes, so it has passed its start, where it sets up its signal
// handling (the Go runtime catches every signal from the start, so
// /proc/PID/status cannot tell).
func waitDialing(t *testing.T, pid int) {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	for end := time.Now().Add(bound); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		fds, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, fd := range fds {
			if target, _ := os.Readlink(filepath.Join(dir, fd.Name())); strings.HasPrefix(target, "socket:") {
				return
			}
		}
	}
	t.Fatalf("process %d opened no socket within %v", pid, bound)
}

// groupMembers returns the live (not zombie) processes of process group pgid.
func groupMembers(pgid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses.
		f := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
		if len(f) < 3 || f[0] == "Z" {
			continue
		}
		if g, _ := strconv.Atoi(f[2]); g == pgid {
			out = append(out, pid)
		}
	}
	return out
}

// TestStatusSessionLock: status reads a lock of a renewal session (an
// auto-extended lock of the library) as held while its session lives, with
// the session's TTL, and as free once the session has ended.
func TestStatusSessionLock(t *testing.T) {
	c := redisproc.Start(t, 5)
	addrs := strings.Join(c.Addrs(), ",")
	pools := make([]pool.Pool, len(c.Addrs()))
	for i, a := range c.Addrs() {
		p, err := pool.Dial(&redis.Options{Addr: a})
		if err != nil {
			t.Fatal(err)
		}
		pools[i] = p
	}
	defer closePools(pools)
	client, err := redlock.New(pools, redlock.WithTTL(time.Minute), redlock.WithAutoExtend(true))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	const key = "status-session"
	l, err := client.TryLock(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	st := startCLI(t, nil, "status", nodeTimeout, "--addrs", addrs, key)
	if code := st.wait(t); code != 0 || !regexp.MustCompile(`held: token `+regexp.QuoteMeta(l.Token())+` on [345] of 5 nodes`).MatchString(st.stdout.String()) {
		t.Fatalf("status of a session lock: exit %d\n%s", code, st.stdout.String())
	}
	rkey := redlock.DefaultKeyPrefix + "{" + key + "}"
	for _, cl := range c.Clients(t) {
		v, _ := cl.Get(context.Background(), rkey).Result()
		_, _, sk, ok := wire.ParseSession(rkey, v)
		if !ok {
			t.Fatalf("%s = %q: not a session lock's value", rkey, v)
		}
		cl.Del(context.Background(), sk) // the session ends, as by expiry
	}
	st = startCLI(t, nil, "status", nodeTimeout, "--addrs", addrs, key)
	if code := st.wait(t); code != exitFree || !strings.Contains(st.stdout.String(), "free:") {
		t.Fatalf("status after the session ended: exit %d\n%s", code, st.stdout.String())
	}
}
