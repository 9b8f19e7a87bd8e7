package redlock

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/quorumlock/quorumlock/drift"
	"github.com/quorumlock/quorumlock/internal/conf"
	"github.com/quorumlock/quorumlock/internal/rng"
	"github.com/quorumlock/quorumlock/internal/simhook"
)

// Option configures a Client (in New) or one call, on top of the Client's
// options; an invalid one fails New or the call, naming it, before any I/O.
type Option func(*conf.Config) error

// Defaults of the options; docs/design.md ("Defaults and why") says why.
const (
	DefaultTTL          = 10 * time.Second
	DefaultNodeTimeout  = 50 * time.Millisecond
	DefaultRetryBase    = 25 * time.Millisecond
	DefaultRetryMax     = 250 * time.Millisecond
	DefaultKeyPrefix    = "quorumlock:"
	defaultRecheckEvery = time.Second
)

func defaultConfig() conf.Config {
	return conf.Config{
		TTL:         DefaultTTL,
		DriftFactor: drift.DefaultFactor,
		NodeTimeout: DefaultNodeTimeout,
		RetryBase:   DefaultRetryBase,
		RetryMax:    DefaultRetryMax,
		Token:       randomToken,
		Prefix:      DefaultKeyPrefix,
		Logger:      slog.New(slog.DiscardHandler),
		Now:         time.Now,
		Recheck:     defaultRecheckEvery,
	}
}

// randomToken returns 128 random bits as 22 URL-safe base64 characters:
// more entropy than a UUID v4 (122 bits) in 14 fewer bytes per lock key on
// every node.
func randomToken() (string, error) { return (*rng.Source)(nil).Token() }

// The simulator's Option: each of its Clients draws from a seeded
// generator, so that a schedule replays.
func init() {
	simhook.Random = func(next func() uint64) any {
		return Option(func(c *conf.Config) error {
			c.Rnd = rng.New(next)
			if !c.CustomToken {
				c.Token = c.Rnd.Token // still the library's tokens: sessions apply
			}
			return nil
		})
	}
}

// MaxTTL is the longest TTL WithTTL takes: a lock's keys on the nodes live
// at most ten times it (a renewal session's lock key), well within what
// Redis' millisecond expiry can hold.
const MaxTTL = 7 * 24 * time.Hour

// WithTTL sets how long a lock lives on each node (default 10 s), rounded
// down to whole milliseconds. It must exceed the drift allowance (TTL × drift
// factor + 2 ms) plus the node timeout, and be at most MaxTTL.
func WithTTL(ttl time.Duration) Option {
	return func(c *conf.Config) error {
		if ttl < time.Millisecond {
			return fmt.Errorf("redlock: WithTTL(%v): the TTL must be at least 1ms (the default is %v)", ttl, DefaultTTL)
		}
		if ttl > MaxTTL {
			return fmt.Errorf("redlock: WithTTL(%v): the TTL must be at most MaxTTL (%v); hold a lock longer by renewing it (WithAutoExtend, Do)", ttl, MaxTTL)
		}
		c.TTL = ttl.Truncate(time.Millisecond)
		return nil
	}
}

// WithDriftFactor sets the clock-rate error assumed between this process and
// each Redis server, as a fraction of the TTL: in [0, 0.5), default 0.01.
func WithDriftFactor(f float64) Option {
	return func(c *conf.Config) error {
		if !(f >= 0 && f < drift.MaxFactor) {
			return fmt.Errorf("redlock: WithDriftFactor(%v): use a value in [0, %v); the default is %v", f, drift.MaxFactor, drift.DefaultFactor)
		}
		c.DriftFactor = f
		return nil
	}
}

// WithNodeTimeout bounds each node's part of an operation (default 50 ms):
// a node not answering by then counts as failed. A round waits no longer
// (one more if the process was starved of CPU), a failed acquisition one
// more for its roll-back, a fenced one one more for its write-back, and a
// Client's first operation up to max(4 × this, 200 ms) for the identity
// check. Keep it well above the servers' round trip, small against the TTL.
func WithNodeTimeout(d time.Duration) Option {
	return func(c *conf.Config) error {
		if d <= 0 {
			return fmt.Errorf("redlock: WithNodeTimeout(%v): the timeout must be positive (the default is %v)", d, DefaultNodeTimeout)
		}
		c.NodeTimeout = d
		return nil
	}
}

// WithRetryBackoff sets Lock's waits: before attempt k+1 a random duration in
// [d/2, d], d = min(max, base·2^k) (defaults 25 ms, 250 ms); a waiter in a
// key's line (see Lock) waits max/2 to max. Lock tries sooner when a release
// of the key wakes it (at once, or within 1 ms of other waiters), once when
// its subscription to the key's releases is confirmed, and, where the nodes
// keep lines, after an attempt whose votes split or a wake-up that did not
// win (within the hand-off grace, min(node timeout, base)).
func WithRetryBackoff(base, max time.Duration) Option {
	return func(c *conf.Config) error {
		if base <= 0 || max < base {
			return fmt.Errorf("redlock: WithRetryBackoff(%v, %v): base must be positive and max at least base (the defaults are %v, %v)", base, max, DefaultRetryBase, DefaultRetryMax)
		}
		c.RetryBase, c.RetryMax = base, max
		return nil
	}
}

// WithMaxWait bounds how long Lock keeps trying (default 0: until its context
// ends); then Lock returns an error matching ErrNotAcquired that carries the
// last attempt's *QuorumError.
func WithMaxWait(d time.Duration) Option {
	return func(c *conf.Config) error {
		if d < 0 {
			return fmt.Errorf("redlock: WithMaxWait(%v): the wait must not be negative (0, the default, waits until the context ends)", d)
		}
		c.MaxWait = d
		return nil
	}
}

// WithTokenGenerator sets the function that makes each attempt's token
// (default: 128 random bits, crypto/rand, as 22 URL-safe base64 characters).
// Tokens must be unique across all clients and attempts, or one client could
// release another's lock, and lack the bytes 0x1c to 0x1f; gen must be safe
// for concurrent use. A gen error or a bad token fails the attempt before I/O;
// so does, with ErrNotAcquired, a token a Lock or an attempt of this Client
// holds on one of the keys (it would be a second holder). Reusing a token on
// a key after its lock ended is unsafe: a late release would delete the key.
func WithTokenGenerator(gen func() (string, error)) Option {
	return func(c *conf.Config) error {
		if gen == nil {
			return errors.New("redlock: WithTokenGenerator(nil): pass a function, or leave the option out for random tokens")
		}
		c.Token, c.CustomToken = gen, true
		return nil
	}
}

// MaxMetadata is the longest description WithMetadata takes, in bytes.
const MaxMetadata = 256

// WithMetadata attaches a description of the holder, shown by Client.Inspect
// and "quorumlock status", to the locks it acquires (in their Token): at most
// MaxMetadata bytes, without the bytes 0x1c to 0x1f; "" removes it.
func WithMetadata(desc string) Option {
	return func(c *conf.Config) error {
		if len(desc) > MaxMetadata {
			return fmt.Errorf("redlock: WithMetadata: the description is %d bytes, more than MaxMetadata (%d): it is stored with the lock on every node", len(desc), MaxMetadata)
		}
		if i := strings.IndexFunc(desc, func(r rune) bool { return r >= 0x1c && r <= 0x1f }); i >= 0 {
			return fmt.Errorf("redlock: WithMetadata(%q): byte %d is %q, one of 0x1c-0x1f, which mark the parts of values the nodes keep", desc, i, desc[i])
		}
		c.Metadata = desc
		return nil
	}
}

// WithKeyPrefix sets the prefix of the Redis keys (default "quorumlock:"): a
// lock named K lives under prefix + "{" + K + "}", K being its Cluster hash
// tag unless the prefix has its own ("{shop}:"). A prefix whose first '{'
// closes at once ("app{}") or never ("app{"), and a key that begins with
// '}', are refused by every call that uses them.
func WithKeyPrefix(prefix string) Option {
	return func(c *conf.Config) error {
		c.Prefix = prefix
		return nil
	}
}

// WithQuorum sets how many nodes must agree (default N/2+1): more than half
// the pools and at most all; a larger quorum tolerates fewer failed nodes.
func WithQuorum(q int) Option {
	return func(c *conf.Config) error {
		if q <= 0 {
			return fmt.Errorf("redlock: WithQuorum(%d): the quorum must be positive", q)
		}
		c.Quorum = q
		return nil
	}
}

// WithLogger sets where the Client logs what its results do not say (default
// nowhere): a node's outage, at start and end (warn; one per node per minute
// at most, the rest counted); a lock lost or left to expire at its maximum
// hold time (warn); pools that reach one server (error).
func WithLogger(l *slog.Logger) Option {
	return func(c *conf.Config) error {
		if l == nil {
			return errors.New("redlock: WithLogger(nil): pass a *slog.Logger, or leave the option out for no logging")
		}
		c.Logger = l
		return nil
	}
}

// withClock replaces the clock that validity is measured on (tests only).
func withClock(now func() time.Time) Option {
	return func(c *conf.Config) error {
		c.Now = now
		return nil
	}
}

// withRecheck sets how often unverified nodes are asked again (tests only).
func withRecheck(d time.Duration) Option {
	return func(c *conf.Config) error {
		c.Recheck = d
		return nil
	}
}

// WithAutoExtend turns automatic renewal on or off (default off; on in Do):
// the lock is renewed to its TTL every WithRenewEvery, a failed renewal
// retried while validity is left, and lost (ErrLockLost), maybe a little
// before its deadline, once none can be confirmed in time. Renewal never
// re-creates a lock and ends when it is released or lost or the Client
// closed. Session locks (random tokens, neither WithFencing nor WithMaxHold,
// Pools of package pool that are not Cluster clients) take only their TTL
// in Extend; the Observer sees their session's renewals as theirs.
func WithAutoExtend(on bool) Option {
	return func(c *conf.Config) error {
		c.AutoExtend = on
		return nil
	}
}

// WithRenewEvery sets the interval of automatic renewal (default TTL/3: two
// renewals can fail before a lock lapses); it must be shorter than the TTL
// less the drift allowance and two node timeouts.
func WithRenewEvery(d time.Duration) Option {
	return func(c *conf.Config) error {
		if d <= 0 {
			return fmt.Errorf("redlock: WithRenewEvery(%v): the interval must be positive (the default is TTL/3)", d)
		}
		c.RenewEvery = d
		return nil
	}
}

// WithMaxHold bounds how long automatic renewal keeps a lock (default 0: no
// bound): no renewal carries its deadline past acquisition + d, so it is then
// lost (ErrLockLost). The lock's first deadline comes from its TTL alone.
func WithMaxHold(d time.Duration) Option {
	return func(c *conf.Config) error {
		if d < 0 {
			return fmt.Errorf("redlock: WithMaxHold(%v): the bound must not be negative (0, the default, means none)", d)
		}
		c.MaxHold = d
		return nil
	}
}

// WithObserver sets an Observer told about every lock's acquisition,
// renewals, loss and release (default: none).
func WithObserver(o Observer) Option {
	return func(c *conf.Config) error {
		c.Observer = o
		return nil
	}
}

// WithFencing turns fencing tokens on or off (default off; the quorumlock
// command fences, so fence the keys it also locks): successive holders' Fence
// then strictly increases (docs/safety.md says when), for one more round trip
// per acquisition. Give every client of a key one setting: acquiring without
// fencing does not advance the counters, which have no TTL. Stop clients of
// earlier versions first: their per-key counters are folded in and deleted.
func WithFencing(on bool) Option {
	return func(c *conf.Config) error {
		c.Fencing = on
		return nil
	}
}

// Shared makes TryLock, Lock and Do take the key as one of its shared holders
// (a read lock): any number at once, and no other lock while they hold it.
// New ones wait behind a waiter of Lock for the key alone. Fence is 0. The
// acquire fails with a plain error before any I/O with WithFencing, or
// unless every Pool is of package pool and none a Cluster client. TryLockAll,
// LockAll and DoAll refuse Shared; Client.Resume does not resume such locks.
func Shared() Option {
	return func(c *conf.Config) error {
		c.Shared = true
		return nil
	}
}
