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
// prints progress, and its summary reports no lost update, no overlap and
// strictly increasing fencing tokens.
func TestDemo(t *testing.T) {
	var out, errs bytes.Buffer
	// A generous node timeout: under -race, with other test binaries on the
	// same 2 cores, the embedded servers can take longer than the 50 ms default.
	code := run(context.Background(), &env{stdout: &out, stderr: &errs},
		[]string{"demo", "-duration", "4s", "-workers", "4", "-node-timeout", "250ms"})
	t.Log("\n" + out.String() + errs.String())
	if code != 0 {
		t.Fatalf("exit status %d", code)
	}
	text := out.String()
	for _, want := range []string{
		"kill node1", "kill node2", "kill node3", "revive node1, node2, node3",
		"nodes up 5/5", // progress lines
		"lost updates:            0\n",
		"overlapping holders:     0\n",
		"fence order:             strictly increasing",
		// a legend for what a newcomer cannot guess
		"failed: lock held = attempts that gave up", "(no quorum answered the release", "also counts acquisitions that",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if strings.Contains(text, "FAILED") {
		t.Error("the demo reports a failure")
	}
	if n := len(regexp.MustCompile(`(?m)^\s+\d+\.\ds  nodes up \d/5  max holders [01]  acquisitions`).FindAllString(text, -1)); n < 3 {
		t.Errorf("%d progress lines with at most one holder, want one a second (at least 3)", n)
	}
	num := func(label string) int {
		t.Helper()
		m := regexp.MustCompile(`(?m)^  ` + label + `:\s+(\d+)`).FindStringSubmatch(text)
		if m == nil {
			t.Fatalf("summary lacks %q", label)
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	written, counter := num("increments written"), num("counter")
	if written == 0 {
		t.Fatal("no increment was written")
	}
	if counter != written {
		t.Errorf("counter %d, %d increments written", counter, written)
	}
	if num("acquisitions") < written {
		t.Errorf("fewer acquisitions than increments")
	}
	if num("quorum failures") == 0 {
		t.Error("no quorum failure counted while 3 of 5 nodes were down")
	}
	if num("after the revival") == 0 {
		t.Error("the lock was never acquired again after the nodes came back")
	}
	m := regexp.MustCompile(`strictly increasing \((\d+) tokens, (\d+) \.\.\. (\d+)\)`).FindStringSubmatch(text)
	if m == nil {
		t.Fatal("fence order line lacks the token count and range")
	}
	first, _ := strconv.Atoi(m[2])
	last, _ := strconv.Atoi(m[3])
	if n, _ := strconv.Atoi(m[1]); n != written || first < 1 || last-first < written-1 {
		t.Errorf("fence order: %d tokens from %d to %d, want %d strictly increasing tokens", n, first, last, written)
	}
}

// TestFenceLogCheck shows that the demo's fence order check can fail.
func TestFenceLogCheck(t *testing.T) {
	var f fenceLog
	for _, tok := range []uint64{3, 5, 9} {
		f.add(tok)
	}
	if bad, first, last := f.check(); bad != 0 || first != 3 || last != 9 {
		t.Fatalf("3 5 9: check() = %d, %d, %d; want 0, 3, 9", bad, first, last)
	}
	f.add(9)
	f.add(4)
	if bad, _, _ := f.check(); bad != 2 {
		t.Fatalf("3 5 9 9 4: %d tokens not above the one before, want 2", bad)
	}
}
