package redlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/quorumlock/quorumlock/drift"
	"github.com/quorumlock/quorumlock/internal/rng"
	"github.com/quorumlock/quorumlock/internal/simhook"
)

// Option configures a Client (in New) or one call, on top of the Client's
// options; an invalid one fails New or the call, naming it, before any I/O.
type Option func(*config) error

// Defaults of the options; docs/design.md ("Defaults and why") says why.
const (
	DefaultTTL          = 10 * time.Second
	DefaultNodeTimeout  = 50 * time.Millisecond
	DefaultRetryBase    = 25 * time.Millisecond
	DefaultRetryMax     = 250 * time.Millisecond
	DefaultKeyPrefix    = "quorumlock:"
	defaultRecheckEvery = time.Second
)

type config struct {
	ttl         time.Duration
	driftFactor float64
	nodeTimeout time.Duration
	retryBase   time.Duration
	retryMax    time.Duration
	maxWait     time.Duration
	token       func() (string, error)
	prefix      string
	quorum      int // 0: a majority of the pools
	logger      *slog.Logger
	now         func() time.Time
	rnd         *rng.Source   // nil: math/rand/v2 and crypto/rand
	recheck     time.Duration // how often unverified nodes are asked for their run_id
	autoExtend  bool
	renewEvery  time.Duration // 0: TTL/3
	maxHold     time.Duration // 0: no limit
	observer    Observer
	fencing     bool
	customToken bool   // WithTokenGenerator was given
	metadata    string // WithMetadata: appended to tokens after node.Meta
	shared      bool   // Shared: a shared holder
	several     bool   // a lock of several keys (TryLockAll): set by Client.several
	permit      bool   // a semaphore's permits: set by Client.Semaphore
	ownFence    bool   // an election's: the key's own fencing counter (ownCounter)
	// retryWait, when not nil, shortens Lock's delay before its next
	// attempt (an election's candidate: to when the leader's key frees).
	retryWait func(c *Client, ctx context.Context, cfg *config, key string, delay time.Duration) time.Duration
}

func defaultConfig() config {
	return config{
		ttl:         DefaultTTL,
		driftFactor: drift.DefaultFactor,
		nodeTimeout: DefaultNodeTimeout,
		retryBase:   DefaultRetryBase,
		retryMax:    DefaultRetryMax,
		token:       randomToken,
		prefix:      DefaultKeyPrefix,
		logger:      slog.New(slog.DiscardHandler),
		now:         time.Now,
		recheck:     defaultRecheckEvery,
	}
}

// randomToken returns 128 random bits as 22 URL-safe base64 characters:
// more entropy than a UUID v4 (122 bits) in 14 fewer bytes per lock key on
// every node.
func randomToken() (string, error) { return (*rng.Source)(nil).Token() }

// jitter returns a random duration in [d/2, d].
func (c *config) jitter(d time.Duration) time.Duration { return c.rnd.Jitter(d) }

// The simulator's Option: each of its Clients draws from a seeded
// generator, so that a schedule replays.
func init() {
	simhook.Random = func(next func() uint64) any {
		return Option(func(c *config) error {
			c.rnd = rng.New(next)
			if !c.customToken {
				c.token = c.rnd.Token // still the library's tokens: sessions apply
			}
			return nil
		})
	}
}

// apply returns a copy of base with opts applied and checked against n pools.
func (base *config) apply(n int, opts []Option) (*config, error) {
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
	if err := c.check(n); err != nil {
		return nil, err
	}
	return &c, nil
}

func (c *config) check(n int) error {
	if err := drift.Check(c.ttl, c.driftFactor, c.nodeTimeout); err != nil {
		return fmt.Errorf("redlock: %w", err)
	}
	if c.renewEvery != 0 && c.renewEvery >= c.ttl-drift.Allowance(c.ttl, c.driftFactor)-2*c.nodeTimeout {
		return fmt.Errorf("redlock: WithRenewEvery(%v): renewals must come well within the TTL %v (less the drift allowance and two node timeouts: one for the round that acquired or renewed, one for the next), or the lock lapses between them; the default is TTL/3", c.renewEvery, c.ttl)
	}
	if c.quorum != 0 && (c.quorum <= n/2 || c.quorum > n) {
		return fmt.Errorf("redlock: quorum %d does not fit %d pools: it must be more than half of them (two quorums must share a node, or two clients could hold one lock) and at most all of them: use %d..%d, or leave it unset for %d", c.quorum, n, n/2+1, n, n/2+1)
	}
	return nil
}

// debug reports whether the logger takes debug records, so that the hot
// paths build a record's attributes only when it does.
func (c *config) debug(ctx context.Context) bool {
	return c.logger.Enabled(ctx, slog.LevelDebug)
}

// quorumOf is the number of nodes that must agree out of n.
func (c *config) quorumOf(n int) int {
	if c.quorum != 0 {
		return c.quorum
	}
	return n/2 + 1
}

// retryDelay is the wait before attempt+1: a random duration in [d/2, d]
// with d = min(retryMax, retryBase·2^attempt).
func (c *config) retryDelay(attempt int) time.Duration {
	d := c.retryMax
	if attempt < 62 && c.retryBase <= d>>attempt { // no overflow: base·2^attempt ≤ max
		d = c.retryBase << attempt
	}
	return c.jitter(d)
}

// MaxTTL is the longest TTL WithTTL takes: a lock's keys on the nodes live
// at most ten times it (a renewal session's lock key), well within what
// Redis' millisecond expiry can hold.
const MaxTTL = 7 * 24 * time.Hour

// WithTTL sets how long a lock lives on each node (default 10 s), rounded
// down to whole milliseconds. It must exceed the drift allowance (TTL × drift
// factor + 2 ms) plus the node timeout, and be at most MaxTTL.
func WithTTL(ttl time.Duration) Option {
	return func(c *config) error {
		if ttl < time.Millisecond {
			return fmt.Errorf("redlock: WithTTL(%v): the TTL must be at least 1ms (the default is %v)", ttl, DefaultTTL)
		}
		if ttl > MaxTTL {
			return fmt.Errorf("redlock: WithTTL(%v): the TTL must be at most MaxTTL (%v); hold a lock longer by renewing it (WithAutoExtend, Do)", ttl, MaxTTL)
		}
		c.ttl = ttl.Truncate(time.Millisecond)
		return nil
	}
}

// WithDriftFactor sets the clock-rate error assumed between this process and
// each Redis server, as a fraction of the TTL: in [0, 0.5), default 0.01.
func WithDriftFactor(f float64) Option {
	return func(c *config) error {
		if !(f >= 0 && f < drift.MaxFactor) {
			return fmt.Errorf("redlock: WithDriftFactor(%v): use a value in [0, %v); the default is %v", f, drift.MaxFactor, drift.DefaultFactor)
		}
		c.driftFactor = f
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
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("redlock: WithNodeTimeout(%v): the timeout must be positive (the default is %v)", d, DefaultNodeTimeout)
		}
		c.nodeTimeout = d
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
	return func(c *config) error {
		if base <= 0 || max < base {
			return fmt.Errorf("redlock: WithRetryBackoff(%v, %v): base must be positive and max at least base (the defaults are %v, %v)", base, max, DefaultRetryBase, DefaultRetryMax)
		}
		c.retryBase, c.retryMax = base, max
		return nil
	}
}

// WithMaxWait bounds how long Lock keeps trying (default 0: until its context
// ends); then Lock returns an error matching ErrNotAcquired that carries the
// last attempt's *QuorumError.
func WithMaxWait(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("redlock: WithMaxWait(%v): the wait must not be negative (0, the default, waits until the context ends)", d)
		}
		c.maxWait = d
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
	return func(c *config) error {
		if gen == nil {
			return errors.New("redlock: WithTokenGenerator(nil): pass a function, or leave the option out for random tokens")
		}
		c.token, c.customToken = gen, true
		return nil
	}
}

// MaxMetadata is the longest description WithMetadata takes, in bytes.
const MaxMetadata = 256

// WithMetadata attaches a description of the holder, shown by Client.Inspect
// and "quorumlock status", to the locks it acquires (in their Token): at most
// MaxMetadata bytes, without the bytes 0x1c to 0x1f; "" removes it.
func WithMetadata(desc string) Option {
	return func(c *config) error {
		if len(desc) > MaxMetadata {
			return fmt.Errorf("redlock: WithMetadata: the description is %d bytes, more than MaxMetadata (%d): it is stored with the lock on every node", len(desc), MaxMetadata)
		}
		if i := strings.IndexFunc(desc, func(r rune) bool { return r >= 0x1c && r <= 0x1f }); i >= 0 {
			return fmt.Errorf("redlock: WithMetadata(%q): byte %d is %q, one of 0x1c-0x1f, which mark the parts of values the nodes keep", desc, i, desc[i])
		}
		c.metadata = desc
		return nil
	}
}

// WithKeyPrefix sets the prefix of the Redis keys (default "quorumlock:"): a
// lock named K lives under prefix + "{" + K + "}", K being its Cluster hash
// tag unless the prefix has its own ("{shop}:"). A prefix whose first '{'
// closes at once ("app{}") or never ("app{"), and a key that begins with
// '}', are refused by every call that uses them.
func WithKeyPrefix(prefix string) Option {
	return func(c *config) error {
		c.prefix = prefix
		return nil
	}
}

// WithQuorum sets how many nodes must agree (default N/2+1): more than half
// the pools and at most all; a larger quorum tolerates fewer failed nodes.
func WithQuorum(q int) Option {
	return func(c *config) error {
		if q <= 0 {
			return fmt.Errorf("redlock: WithQuorum(%d): the quorum must be positive", q)
		}
		c.quorum = q
		return nil
	}
}

// WithLogger sets where the Client logs what its results do not say (default
// nowhere): a node's outage, at start and end (warn; one per node per minute
// at most, the rest counted); a lock lost or left to expire at its maximum
// hold time (warn); pools that reach one server (error).
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return errors.New("redlock: WithLogger(nil): pass a *slog.Logger, or leave the option out for no logging")
		}
		c.logger = l
		return nil
	}
}

// withClock replaces the clock that validity is measured on (tests only).
func withClock(now func() time.Time) Option {
	return func(c *config) error {
		c.now = now
		return nil
	}
}

// withRecheck sets how often unverified nodes are asked again (tests only).
func withRecheck(d time.Duration) Option {
	return func(c *config) error {
		c.recheck = d
		return nil
	}
}

// renewInterval is how often auto-extension renews: WithRenewEvery, or TTL/3.
func (c *config) renewInterval() time.Duration {
	if c.renewEvery > 0 {
		return c.renewEvery
	}
	return c.ttl / 3
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
	return func(c *config) error {
		c.autoExtend = on
		return nil
	}
}

// WithRenewEvery sets the interval of automatic renewal (default TTL/3: two
// renewals can fail before a lock lapses); it must be shorter than the TTL
// less the drift allowance and two node timeouts.
func WithRenewEvery(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("redlock: WithRenewEvery(%v): the interval must be positive (the default is TTL/3)", d)
		}
		c.renewEvery = d
		return nil
	}
}

// WithMaxHold bounds how long automatic renewal keeps a lock (default 0: no
// bound): no renewal carries its deadline past acquisition + d, so it is then
// lost (ErrLockLost). The lock's first deadline comes from its TTL alone.
func WithMaxHold(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("redlock: WithMaxHold(%v): the bound must not be negative (0, the default, means none)", d)
		}
		c.maxHold = d
		return nil
	}
}

// WithObserver sets an Observer told about every lock's acquisition,
// renewals, loss and release (default: none).
func WithObserver(o Observer) Option {
	return func(c *config) error {
		c.observer = o
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
	return func(c *config) error {
		c.fencing = on
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
	return func(c *config) error {
		c.shared = true
		return nil
	}
}
