// Package conf holds the settings of a Client or of one call: the values
// package redlock's options set, checked together, and the values derived
// from them. It knows nothing of locks; docs/design.md ("Defaults and why")
// says why each default is what it is.
package conf

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/quorumlock/quorumlock/drift"
	"github.com/quorumlock/quorumlock/internal/rng"
)

// Config is one Client's or one call's settings. A Config is not changed
// once a Client or a call uses it: options apply to a copy.
// Each field is the value of the redlock option of its name (WithTTL sets
// TTL, WithRetryBackoff RetryBase and RetryMax), unless its comment says
// otherwise.
type Config struct {
	TTL         time.Duration
	DriftFactor float64
	NodeTimeout time.Duration
	RetryBase   time.Duration
	RetryMax    time.Duration
	MaxWait     time.Duration
	Token       func() (string, error) // WithTokenGenerator, or the library's random tokens
	Prefix      string                 // WithKeyPrefix
	Quorum      int                    // 0: a majority of the pools
	Logger      *slog.Logger
	Now         func() time.Time
	Rnd         *rng.Source   // nil: math/rand/v2 and crypto/rand
	Recheck     time.Duration // how often unverified nodes are asked for their run_id
	AutoExtend  bool
	RenewEvery  time.Duration // 0: TTL/3
	MaxHold     time.Duration // 0: no limit
	Observer    any           // a redlock.Observer (WithObserver); nil: none
	Fencing     bool
	CustomToken bool   // WithTokenGenerator was given
	Metadata    string // WithMetadata: appended to tokens after node.Meta
	Shared      bool   // Shared: a shared holder
	Several     bool   // a lock of several keys (TryLockAll): set by Client.several
	Permit      bool   // a semaphore's permits: set by Client.Semaphore
	Election    bool   // an election's candidate: the key's own fencing counter
	// RetryWait, when not nil, shortens Lock's delay before its next
	// attempt (an election's candidate: to when the leader's key frees).
	RetryWait func(ctx context.Context, cfg *Config, key string, delay time.Duration) time.Duration
}

// Apply returns a copy of base with opts applied and checked against n
// pools (base itself when there are none), or the first error: a nil
// option's, an option's own, or Check's.
func Apply[O ~func(*Config) error](base *Config, n int, opts []O) (*Config, error) {
	if len(opts) == 0 {
		return base, nil
	}
	c := *base
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("redlock: an option is nil")
		}
		if err := o(&c); err != nil {
			return nil, err
		}
	}
	if err := c.Check(n); err != nil {
		return nil, err
	}
	return &c, nil
}

// Jitter returns a random duration in [d/2, d].
func (c *Config) Jitter(d time.Duration) time.Duration { return c.Rnd.Jitter(d) }

// Check returns an error naming the option at fault when c's settings do
// not fit together or with n pools, nil when they do.
func (c *Config) Check(n int) error {
	if err := drift.Check(c.TTL, c.DriftFactor, c.NodeTimeout); err != nil {
		return fmt.Errorf("redlock: %w", err)
	}
	if c.RenewEvery != 0 && c.RenewEvery >= c.TTL-drift.Allowance(c.TTL, c.DriftFactor)-2*c.NodeTimeout {
		return fmt.Errorf("redlock: WithRenewEvery(%v): renewals must come well within the TTL %v (less the drift allowance and two node timeouts: one for the round that acquired or renewed, one for the next), or the lock lapses between them; the default is TTL/3", c.RenewEvery, c.TTL)
	}
	if c.Quorum != 0 && (c.Quorum <= n/2 || c.Quorum > n) {
		return fmt.Errorf("redlock: quorum %d does not fit %d pools: it must be more than half of them (two quorums must share a node, or two clients could hold one lock) and at most all of them: use %d..%d, or leave it unset for %d", c.Quorum, n, n/2+1, n, n/2+1)
	}
	return nil
}

// Debug reports whether the logger takes Debug records, so that the hot
// paths build a record's attributes only when it does.
func (c *Config) Debug(ctx context.Context) bool {
	return c.Logger.Enabled(ctx, slog.LevelDebug)
}

// QuorumOf is the number of nodes that must agree out of n.
func (c *Config) QuorumOf(n int) int {
	if c.Quorum != 0 {
		return c.Quorum
	}
	return n/2 + 1
}

// RetryDelay is the wait before attempt+1: a random duration in [d/2, d]
// with d = min(retryMax, retryBase·2^attempt).
func (c *Config) RetryDelay(attempt int) time.Duration {
	d := c.RetryMax
	if attempt < 62 && c.RetryBase <= d>>attempt { // no overflow: base·2^attempt ≤ max
		d = c.RetryBase << attempt
	}
	return c.Jitter(d)
}

// RenewInterval is how often auto-extension renews: WithRenewEvery, or TTL/3.
func (c *Config) RenewInterval() time.Duration {
	if c.RenewEvery > 0 {
		return c.RenewEvery
	}
	return c.TTL / 3
}
