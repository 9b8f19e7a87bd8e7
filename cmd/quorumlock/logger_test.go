package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

func TestLineHandler(t *testing.T) {
	var b bytes.Buffer
	l := slog.New(newLineHandler(&b, "quorumlock exec: ", nil)).With("key", "deploy")
	l.Info("not shown")
	l.Warn("redlock: renewal failed", "err", `2 of 5 "nodes"`, "n", 3, "empty", "")
	want := `quorumlock exec: redlock: renewal failed key=deploy err="2 of 5 \"nodes\"" n=3 empty=""` + "\n"
	if b.String() != want {
		t.Fatalf("got  %q\nwant %q", b.String(), want)
	}
}

// TestLineHandlerDropsRetiredConnections: a Pool's line about a connection
// closed without an error (go-redis retired it, as one the restart guard
// refused at set-up) is not printed, and came before the command's own
// report of the guard; a close after an error still is.
func TestLineHandlerDropsRetiredConnections(t *testing.T) {
	var b strings.Builder
	l := slog.New(newLineHandler(&b, "quorumlock exec: ", nil))
	l.Warn("quorumlock: closed a connection to the Redis server; the next command dials again", "after", "no error: go-redis retired it (idle or too old)")
	if b.Len() != 0 {
		t.Fatalf("a retired connection was logged: %q", b.String())
	}
	l.Warn("quorumlock: closed a connection to the Redis server; the next command dials again", "after", "read: i/o timeout")
	if !strings.Contains(b.String(), "i/o timeout") {
		t.Fatalf("a connection closed after an error was not logged: %q", b.String())
	}
}
