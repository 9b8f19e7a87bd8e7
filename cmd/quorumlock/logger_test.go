package main

import (
	"bytes"
	"log/slog"
	"testing"
)

func TestLineHandler(t *testing.T) {
	var b bytes.Buffer
	l := slog.New(newLineHandler(&b, "quorumlock exec: ")).With("key", "deploy")
	l.Info("not shown")
	l.Warn("redlock: renewal failed", "err", `2 of 5 "nodes"`, "n", 3, "empty", "")
	want := `quorumlock exec: redlock: renewal failed key=deploy err="2 of 5 \"nodes\"" n=3 empty=""` + "\n"
	if b.String() != want {
		t.Fatalf("got  %q\nwant %q", b.String(), want)
	}
}
