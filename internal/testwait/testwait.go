// Package testwait bounds, in tests, a call that must return by itself.
package testwait

import (
	"context"
	"testing"
	"time"
)

// ReturnsWithin runs call with a context that never ends by itself and
// returns call's error. If call has not returned after d, it cancels the
// context, waits for call to end (so that no goroutine outlives the test)
// and fails the test, saying why: a call that has to be cancelled to
// return retried what it should have reported.
func ReturnsWithin(t testing.TB, d time.Duration, why string, call func(context.Context) error) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan error, 1)
	go func() { got <- call(ctx) }()
	select {
	case err := <-got:
		return err
	case <-time.After(d):
		cancel()
		err := <-got
		t.Fatalf("the call had not returned after %v (%s); cancelled: %v", d, why, err)
		return err
	}
}
