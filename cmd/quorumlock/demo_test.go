package main

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestDemo runs the demo on a short schedule: it kills and revives nodes,
// and its summary reports no lost update and no overlap.
func TestDemo(t *testing.T) {
	var out bytes.Buffer
	// A generous node timeout: under -race, with other test binaries on the
	// same 2 cores, the embedded servers can take longer than the 50 ms default.
	code := run(context.Background(), &env{stdout: &out, stderr: &out}, []string{"demo", "-duration", "4s", "-workers", "4", "-node-timeout", "250ms"})
	t.Log("\n" + out.String())
	if code != 0 {
		t.Fatalf("exit status %d", code)
	}
	for _, want := range []string{"kill node1", "kill node3", "revive node1", "lost updates:           0", "overlapping holders:    0"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("output lacks %q", want)
		}
	}
	m := regexp.MustCompile(`critical sections:\s+(\d+)`).FindStringSubmatch(out.String())
	if n, _ := strconv.Atoi(m[1]); n == 0 {
		t.Fatal("no critical section ran")
	}
	m = regexp.MustCompile(`after the revival:\s+(\d+)`).FindStringSubmatch(out.String())
	if n, _ := strconv.Atoi(m[1]); n == 0 {
		t.Fatal("the lock was never acquired again after the nodes came back")
	}
}
