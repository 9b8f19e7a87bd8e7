package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// envBeCLI makes the test binary run as the quorumlock command: the tests
// start it as a real process (os.Args[0]) to exercise exec, signals and
// exit statuses end to end, without a separate build.
const envBeCLI = "QUORUMLOCK_TEST_BE_CLI"

// TestMain runs the command when started as it (see envBeCLI), and
// otherwise runs the tests and fails the run when they leave goroutines
// behind.
//
// go-redis pools that failed to dial a dead node run a probe
// (internal/pool.(*ConnPool).tryDial) that redials once a second and ends at
// its next turn after the pool is closed: TestMain waits (bounded) for those
// before the leak check, which ignores no goroutine.
func TestMain(m *testing.M) {
	if os.Getenv(envBeCLI) == "1" {
		os.Unsetenv(envBeCLI)
		os.Args = append([]string{"quorumlock"}, os.Args[1:]...)
		os.Exit(processMain())
	}
	code := m.Run()
	if code == 0 {
		waitFor("(*ConnPool).tryDial", 5*time.Second)
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: goroutines left behind after the tests: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// waitFor waits until no goroutine has fn in its stack, at most bound.
func waitFor(fn string, bound time.Duration) {
	buf := make([]byte, 1<<20)
	for end := time.Now().Add(bound); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		n := runtime.Stack(buf, true)
		if !bytes.Contains(buf[:n], []byte(fn)) {
			return
		}
	}
}

func TestUsage(t *testing.T) {
	for _, args := range [][]string{
		nil,
		{"nope"},
		{"demo", "-duration", "1ms"},
		{"demo", "-bogus"},
		{"demo", "extra"},
		{"exec"},
		{"exec", "key"},
		{"exec", "key", "--"},
		{"exec", "--wait", "-1s", "key", "--", "true"},
		{"exec", "--grace", "-1s", "key", "--", "true"},
		{"exec", "--ttl", "soon", "key", "--", "true"},
		{"exec", "key", "--", "true"}, // no nodes
		{"exec", "--addrs", "localhost", "key", "--", "true"},
		{"exec", "--addrs", "a:1,a:1", "key", "--", "true"},
		{"exec", "--addrs", "127.0.0.1:1", "--ttl", "10ms", "key", "--", "true"},
		{"status"},
		{"status", "a", "b"},
		{"status", "--addrs", "redis://:hunter2@[::1:6379", "key"},
	} {
		var out, errs bytes.Buffer
		code := run(context.Background(), &env{stdout: &out, stderr: &errs}, args)
		if code != exitUsage {
			t.Errorf("%q: status %d, want %d (bad usage)\n%s", args, code, exitUsage, errs.String())
		}
		if errs.Len() == 0 {
			t.Errorf("%q: nothing on stderr", args)
		}
		if strings.Contains(errs.String(), "hunter2") {
			t.Errorf("%q: the password shows in the error: %s", args, errs.String())
		}
	}
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{
		{"--help"}, {"help"}, {"-h"},
		{"exec", "--help"}, {"exec", "-h"}, {"help", "exec"}, {"exec", "key", "--help"},
		{"status", "--help"}, {"demo", "--help"},
	} {
		var out, errs bytes.Buffer
		if code := run(context.Background(), &env{stdout: &out, stderr: &errs}, args); code != 0 {
			t.Errorf("%q: status %d, want 0\n%s", args, code, errs.String())
		}
		if !strings.Contains(out.String(), "usage: quorumlock") {
			t.Errorf("%q: no usage on stdout:\n%s", args, out.String())
		}
	}
	var out bytes.Buffer
	run(context.Background(), &env{stdout: &out, stderr: &out}, []string{"exec", "--help"})
	for _, want := range []string{"QUORUMLOCK_TOKEN", "QUORUMLOCK_FENCE", "--grace", "--wait", "--ttl", "--fencing", "QUORUMLOCK_ADDRS",
		"3       not acquired", "4       lock lost", "5       lock service unavailable", "2       bad usage"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("exec --help lacks %q", want)
		}
	}
}
