package main

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/quorumlock/quorumlock/internal/leakcheck"
)

// envBeCLI makes the test binary run as the quorumlock command: the tests
// start it as a real process (os.Args[0]) to exercise exec, signals and
// exit statuses end to end, without a separate build.
const envBeCLI = "QUORUMLOCK_TEST_BE_CLI"

// TestMain runs the command when started as it (see envBeCLI), and
// otherwise runs the tests and fails the run when they leave goroutines
// behind (see package leakcheck).
func TestMain(m *testing.M) {
	if os.Getenv(envBeCLI) == "1" {
		os.Unsetenv(envBeCLI)
		os.Args = append([]string{"quorumlock"}, os.Args[1:]...)
		os.Exit(processMain())
	}
	os.Exit(leakcheck.Run(m))
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
		{"exec", "--wait", "always", "key", "--", "true"},
		{"exec", "--addrs", "127.0.0.1:1", "--conflict-exit", "0", "key", "--", "true"},
		{"exec", "--addrs", "127.0.0.1:1", "--conflict-exit", "256", "key", "--", "true"},
		{"exec", "--grace", "-1s", "key", "--", "true"},
		{"exec", "--ttl", "soon", "key", "--", "true"},
		{"exec", "--addrs", "127.0.0.1:1", "--restart-guard", "-1s", "key", "--", "true"},
		{"exec", "key", "--", "true"}, // no nodes
		{"exec", "--addrs", "localhost", "key", "--", "true"},
		{"exec", "--addrs", "a:1,a:1", "key", "--", "true"},
		{"exec", "--addrs", "127.0.0.1:1", "--ttl", "10ms", "key", "--", "true"},
		{"exec", "--addrs", "127.0.0.1:1", "--ttl", "100000h", "key", "--", "true"},
		{"status"},
		{"status", "a", "b"},
		{"hold"},
		{"hold", "a", "b"},
		{"hold", "--addrs", "127.0.0.1:1", "--wait", "-1s", "key"},
		{"release", "key"},
		{"release", "key", "token", "more"},
		{"release", "--addrs", "127.0.0.1:1", "key", `"unterminated`},
		{"release", "", "token"},
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
		if goName := goNames.FindString(errs.String()); goName != "" {
			t.Errorf("%q: the error speaks of the library's %s, not of the command's flags: %s", args, goName, errs.String())
		}
	}
}

// goNames are the library's Go names, which the command's messages must
// not use.
var goNames = regexp.MustCompile(`\bWith[A-Z]\w+|\bpool\.|\bMaxTTL\b`)

// TestExecMissingKey: "exec -- COMMAND" lacks the KEY, not the COMMAND:
// after "--" comes the command (issue 36).
func TestExecMissingKey(t *testing.T) {
	for _, args := range [][]string{{"exec", "--", "true"}, {"exec", "--wait", "1s", "--", "true", "x"}} {
		var out, errs bytes.Buffer
		code := run(context.Background(), &env{stdout: &out, stderr: &errs}, args)
		if code != exitUsage || !strings.Contains(errs.String(), "missing KEY") || strings.Contains(errs.String(), "missing COMMAND") {
			t.Errorf("%q: status %d, want %d saying KEY is missing:\n%s", args, code, exitUsage, errs.String())
		}
	}
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{
		{"--help"}, {"help"}, {"-h"},
		{"exec", "--help"}, {"exec", "-h"}, {"help", "exec"}, {"exec", "key", "--help"},
		{"status", "--help"}, {"demo", "--help"}, {"hold", "--help"}, {"release", "--help"},
	} {
		var out, errs bytes.Buffer
		if code := run(context.Background(), &env{stdout: &out, stderr: &errs}, args); code != 0 {
			t.Errorf("%q: status %d, want 0\n%s", args, code, errs.String())
		}
		if !strings.Contains(out.String(), "usage: quorumlock") {
			t.Errorf("%q: no usage on stdout:\n%s", args, out.String())
		}
	}
	for _, cmd := range []string{"exec", "status", "hold", "release", "demo"} { // one example each
		var out bytes.Buffer
		run(context.Background(), &env{stdout: &out, stderr: &out}, []string{cmd, "--help"})
		if !regexp.MustCompile(`Examples?:\n  quorumlock ` + cmd + ` `).MatchString(out.String()) {
			t.Errorf("%s --help has no example:\n%s", cmd, out.String())
		}
	}
	var out bytes.Buffer
	run(context.Background(), &env{stdout: &out, stderr: &out}, []string{"exec", "--help"})
	if !strings.Contains(out.String(), "while the masters keep their data") {
		t.Error("exec --help promises increasing fencing tokens without their condition (docs/safety.md)")
	}
	for _, want := range []string{"QUORUMLOCK_TOKEN", "QUORUMLOCK_FENCE", "--grace", "--wait", "--ttl", "--fencing", "QUORUMLOCK_ADDRS",
		"3       not acquired", "4       lock lost", "5       lock service unavailable", "2       bad usage",
		"on by default here, unlike the library"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("exec --help lacks %q", want)
		}
	}
}
