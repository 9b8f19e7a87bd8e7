package integration

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/internal/testwait"
	"github.com/quorumlock/quorumlock/redlock"
)

// TestAuthRefusalReturnsAtOnce runs Do and Lock with a context that never
// ends against servers that require a password, from Clients with a wrong
// password and with none: a refusal of the credentials by every node is a
// configuration error, not an outage, so each call returns within a second
// with an error that matches redlock.ErrAuth and says what is wrong.
func TestAuthRefusalReturnsAtOnce(t *testing.T) {
	c := startCluster(t, time.Minute, "s3cret")
	for _, tc := range []struct {
		name, password, says string
	}{
		{"wrong-password", "wrong", "wrong password or user"},
		{"no-password", "", "authentication required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lc := c.newLockClient(t, tc.name, func(i int) *redis.Options {
				return &redis.Options{Addr: c.Node(i).Addr(), Password: tc.password}
			})
			calls := []struct {
				name string
				call func(context.Context) error
			}{
				{"Do", func(ctx context.Context) error {
					return lc.Do(ctx, "auth", func(context.Context) error {
						t.Error("Do ran its function without the lock")
						return nil
					})
				}},
				{"Lock", func(ctx context.Context) error { _, err := lc.Lock(ctx, "auth"); return err }},
				{"Do again", func(ctx context.Context) error {
					return lc.Do(ctx, "auth", func(context.Context) error { return nil })
				}},
			}
			for _, cl := range calls {
				start := time.Now()
				err := testwait.ReturnsWithin(t, 10*time.Second, "it retried the refusal", cl.call)
				took := time.Since(start)
				t.Logf("%s (%v): %v", cl.name, took.Round(time.Millisecond), err)
				if !errors.Is(err, redlock.ErrAuth) {
					t.Fatalf("%s = %v, want an error matching redlock.ErrAuth", cl.name, err)
				}
				if took > time.Second {
					t.Errorf("%s took %v, want under a second", cl.name, took)
				}
				if msg := err.Error(); !strings.Contains(msg, tc.says) {
					t.Errorf("%s: the error does not say %q: %s", cl.name, tc.says, msg)
				}
			}
		})
	}
}
