package redlock

import (
	"context"
	crand "crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/quorumlock/quorumlock/drift"
)

// Option configures a Client (in New) or one call (TryLock, Lock): options
// given to a call apply on top of the Client's. Options are checked when
// they are applied; an invalid one makes New or the call return an error
// that names it, before any I/O.
type Option func(*config) error

// Defaults of the options; each option's doc says why.
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
	rnd         *random       // nil: math/rand/v2 and crypto/rand
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
func randomToken() (string, error) {
	var b [16]byte
	if _, err := crand.Read(b[:]); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
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

// WithTTL sets how long the lock lives on each Redis node (default 10 s),
// rounded down to whole milliseconds because Redis counts milliseconds. The
// lock's validity is the TTL less the time the acquisition took and the drift
// allowance (TTL × drift factor + 2 ms); the TTL must exceed that allowance
// plus the per-node timeout, or every acquisition would fail, and be at most
// MaxTTL.
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
// each Redis server, as a fraction of the TTL (default 0.01, that is 1 %). It
// must lie in [0, 0.5).
func WithDriftFactor(f float64) Option {
	return func(c *config) error {
		if !(f >= 0 && f < drift.MaxFactor) {
			return fmt.Errorf("redlock: WithDriftFactor(%v): use a value in [0, %v); the default is %v", f, drift.MaxFactor, drift.DefaultFactor)
		}
		c.driftFactor = f
		return nil
	}
}

// WithNodeTimeout bounds each node's part of an operation (default 50 ms): a
// node that has not answered by then counts as failed, so a round waits no
// longer than this for its nodes, however many are down or paused (only a
// process that was not running when the time was up waits up to one more
// for replies already read). A failed acquisition adds at most one more
// timeout for its roll-back, fencing one for its write-back, and a Client's
// first operation an identity check of at most max(4 × this, 200 ms). Choose
// it well above the round-trip time to your Redis servers and small against
// the TTL (docs/design.md, "Defaults and why").
func WithNodeTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("redlock: WithNodeTimeout(%v): the timeout must be positive (the default is %v)", d, DefaultNodeTimeout)
		}
		c.nodeTimeout = d
		return nil
	}
}

// WithRetryBackoff sets the waits between the attempts of Lock: before
// attempt k+1 it waits a random duration between d/2 and d, where
// d = min(max, base·2^k) (defaults 25 ms and 250 ms; docs/design.md,
// "Defaults and why"). A waiter in a key's line (Lock, with Pools of package
// pool that are not Cluster clients) waits between max/2 and max from its
// first failed attempt on: a release wakes it when its turn comes.
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
// ends). When the budget is spent, Lock returns an error matching
// ErrNotAcquired that carries the last attempt's *QuorumError.
func WithMaxWait(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("redlock: WithMaxWait(%v): the wait must not be negative (0, the default, waits until the context ends)", d)
		}
		c.maxWait = d
		return nil
	}
}

// WithTokenGenerator sets the function that makes each attempt's token, the
// value stored under the lock key that proves ownership (default: 128
// random bits from crypto/rand, as 22 URL-safe base64 characters). Tokens
// must be unique across all clients and attempts, or one client could
// release another's lock, and must not contain the bytes 0x1c to 0x1f
// (markers of values the nodes keep). The function must be safe
// for concurrent use; an error from it, or a token that breaks these rules,
// fails the attempt without any I/O. A token that a Lock of this Client
// holds on one of the attempt's keys, or that another attempt under way is
// trying there, is refused too: the attempt fails with ErrNotAcquired
// without I/O (the nodes would take it for the holder's, and make a second
// holder). Reusing a token on a key even after its lock ended is unsafe: a
// release of the earlier lock still under way would delete the key. Locks
// with generated tokens are not renewed through a renewal session (see
// WithAutoExtend).
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

// WithMetadata attaches a short description of the holder (host, pid, job:
// at most MaxMetadata bytes, without the bytes 0x1c to 0x1f) to the locks it
// acquires, for people and tools that look at a lock: Client.Inspect and
// "quorumlock status" show it. It travels in the lock's token, after the
// byte 0x1d (Token returns both, and Resume takes both), so it costs
// nothing to locks without it. A description that breaks the rules is an
// error of the call (or of New), before any I/O; "" removes it.
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

// WithKeyPrefix sets the prefix of the Redis keys (default "quorumlock:").
// A lock named K lives under the Redis key prefix + "{" + K + "}": the braces
// make it a Redis Cluster hash tag, so keys that belong to one lock always
// share a slot. A prefix with a hash tag of its own ("{shop}:") puts every
// lock under it in that tag's slot. A prefix whose first '{' is closed at
// once ("app{}") or never ("app{") is refused by every call that uses it,
// as a key beginning with '}' is: the lock's keys would have no hash tag,
// or not one tag, and could land in different slots.
func WithKeyPrefix(prefix string) Option {
	return func(c *config) error {
		c.prefix = prefix
		return nil
	}
}

// WithQuorum sets how many nodes must agree (default: a majority, N/2+1).
// It must be more than half the pools, so that two quorums always share a
// node, and at most all of them. A larger quorum tolerates fewer failed nodes.
func WithQuorum(q int) Option {
	return func(c *config) error {
		if q <= 0 {
			return fmt.Errorf("redlock: WithQuorum(%d): the quorum must be positive", q)
		}
		c.quorum = q
		return nil
	}
}

// WithLogger sets where the Client logs what callers do not see in return
// values: a node's outage, once when a command there first fails ("node X
// unreachable since ...", warn; the failures that follow are counted, not
// logged) and once when it answers again (warn, with the count), at most
// one outage per node per minute (shorter ones are counted); a lock
// lost or left to expire at its maximum hold time (warn); pools found to
// reach the same server (error). The default logs nothing. go-redis logs
// some failures of its own (dial errors) through its global logger, which
// redis.SetLogger sets.
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

// WithAutoExtend turns automatic renewal of acquired locks on or off (default
// off for Lock and TryLock, on inside Do). The Client renews such a lock to
// its TTL every WithRenewEvery, never twice at once, and retries a failed
// renewal while validity is left; once no renewal can be confirmed before the
// deadline, the lock is lost (Done closes; Err and the Context's cause are
// ErrLockLost), possibly a little before its deadline. Renewal never
// re-creates an expired lock, and stops when the lock is released, lost or
// its Client closed; Release waits for a renewal under way. Locks with random
// tokens, over Pools of package pool that are not Cluster clients and with
// neither WithFencing nor WithMaxHold, are renewed through a renewal session:
// Extend takes only their TTL, and the Observer sees each renewal of the
// session as one of each of its locks (docs/design.md, "Leases").
func WithAutoExtend(on bool) Option {
	return func(c *config) error {
		c.autoExtend = on
		return nil
	}
}

// WithRenewEvery sets the interval of automatic renewal (default TTL/3: two
// renewals can fail before a lock lapses). It must be shorter than the TTL
// less the drift allowance and two per-node timeouts.
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
// bound). Renewals never carry the deadline past acquisition + d (the last
// one uses a shorter TTL), and stop when no more fits; the lock then expires
// at its deadline and is reported lost (ErrLockLost). It guards against
// holders that never finish. It applies only with auto-extension; a lock's
// first deadline comes from its TTL alone.
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

// WithFencing turns fencing tokens on or off (default off). With fencing,
// Lock.Fence of successive holders of a key strictly increases (docs/safety.md
// has the argument and its conditions: persistent masters), at the cost of a
// second round trip per acquisition, counted in its elapsed time. The
// counters live on the nodes without a TTL: prefix + "fence", one per master,
// or one per hash slot on a Redis Cluster Pool (pool.Slotted). A lock's
// counter of earlier versions (its Redis key + ":fence") is folded in and
// deleted: stop clients of earlier versions before starting these. Use the
// same setting for every client of a key: an acquisition without fencing
// does not advance the counters. The library leaves fencing off because a
// caller with nothing to hand the token to would pay its round trip for
// nothing; the quorumlock command turns it on, since a command run under a
// lock may use the token it exports, so pass WithFencing(true) for keys
// that command also locks.
func WithFencing(on bool) Option {
	return func(c *config) error {
		c.fencing = on
		return nil
	}
}

// Shared makes TryLock, Lock and Do take the key as one of its shared
// holders (a read lock) rather than alone: any number of shared holders may
// hold a key at once, and no other lock while they do. A waiter of Lock for
// the key alone (an exclusive holder) is not starved by a stream of shared
// holders: while one waits in the key's line, new shared holders wait
// behind it (docs/design.md, "Shared holders"). The returned Lock has the
// whole lease API, auto-extension included; Fence is 0 (WithFencing is
// refused: fences order writers).
//
// Shared locks need every Pool to be of package pool and none a Cluster
// client (the masters' lines of waiters hold new shared holders back); the
// acquire fails with a plain error before any I/O otherwise, and with
// WithFencing. Client.Resume does not resume shared holders, and
// TryLockAll, LockAll and DoAll refuse Shared.
func Shared() Option {
	return func(c *config) error {
		c.shared = true
		return nil
	}
}
