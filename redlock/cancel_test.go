package redlock

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestCancelledDuringCall: when the caller's context ends while Extend, Held
// or Locked wait for the nodes (three of five hold their calls back), the
// error matches ctx.Err(), as TryLock's and Lock's do, besides the
// *QuorumError; a cancelled Extend does not lose the lock. Before, those
// three returned the bare *QuorumError, and a caller could not tell its own
// cancellation from failing nodes.
func TestCancelledDuringCall(t *testing.T) {
	e := newEnv(t, 5)
	c := e.client()
	l, err := c.TryLock(context.Background(), "cancel")
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{2, 3, 4} {
		e.nodes[i].fault.hold(false, "extend", "get")
	}
	calls := map[string]func(ctx context.Context) error{
		"Extend": func(ctx context.Context) error { return l.Extend(ctx, 0) },
		"Held":   func(ctx context.Context) error { _, err := l.Held(ctx); return err },
		"Locked": func(ctx context.Context) error { _, err := c.Locked(ctx, "cancel"); return err },
	}
	for name, call := range calls {
		for _, end := range []struct {
			name string
			ctx  func() (context.Context, context.CancelFunc)
			want error
		}{
			{"cancelled", func() (context.Context, context.CancelFunc) {
				ctx, cancel := context.WithCancel(context.Background())
				time.AfterFunc(20*time.Millisecond, cancel)
				return ctx, cancel
			}, context.Canceled},
			{"deadline", func() (context.Context, context.CancelFunc) {
				return context.WithTimeout(context.Background(), 20*time.Millisecond)
			}, context.DeadlineExceeded},
		} {
			ctx, cancel := end.ctx()
			err := call(ctx)
			cancel()
			if !errors.Is(err, end.want) {
				t.Errorf("%s, context %s while the nodes are held: %v; want an error matching %v", name, end.name, err, end.want)
			}
			if qe := new(*QuorumError); !errors.As(err, qe) {
				t.Errorf("%s, context %s: %v carries no *QuorumError", name, end.name, err)
			}
		}
	}
	if err := l.Err(); err != nil {
		t.Errorf("the lock after cancelled calls: Err = %v, want nil", err)
	}
	for _, i := range []int{2, 3, 4} {
		e.nodes[i].fault.open()
	}
	if err := l.Extend(context.Background(), 0); err != nil {
		t.Errorf("Extend after the cancelled calls: %v", err)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}
