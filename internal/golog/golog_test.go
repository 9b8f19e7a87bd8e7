package golog_test

import (
	"context"
	"errors"
	"log"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/golog"
	"github.com/quorumlock/quorumlock/internal/redisproc"
	"github.com/quorumlock/quorumlock/internal/testlog"
)

// TestMarkKeepsTheError: a marked dial error has the text of the error it
// marks and matches what that error matches, a timeout included.
func TestMarkKeepsTheError(t *testing.T) {
	inner := &net.OpError{Op: "dial", Net: "tcp", Err: os.ErrDeadlineExceeded}
	err := golog.Mark(inner)
	var op *net.OpError
	if err.Error() != inner.Error() || !errors.As(err, &op) || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Mark(%v) = %v; want the same text, matching *net.OpError and os.ErrDeadlineExceeded", inner, err)
	}
	if to, ok := err.(interface{ Timeout() bool }); !ok || !to.Timeout() {
		t.Fatalf("Mark of a dial timeout does not say Timeout() true")
	}
}

// TestKitClientQuiet: the test kit's go-redis clients (redisproc.NewClient,
// testkit.NewClient) do not make go-redis log their failed dials to a node
// the test stopped (a test-kit test logged 66 such lines in 1.6 s).
func TestKitClientQuiet(t *testing.T) {
	var out testlog.Buffer
	prev := golog.Out.Swap(log.New(&out, "redis: ", log.LstdFlags))
	defer golog.Out.Store(prev)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	c := redisproc.NewClient(addr, "")
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for range 3 {
		if err := c.Ping(ctx).Err(); err == nil {
			t.Fatal("PING to a stopped node succeeded")
		}
	}
	if s := out.String(); strings.Contains(s, "failed to dial") {
		t.Fatalf("go-redis logged the kit client's failed dials:\n%s", s)
	}
}
