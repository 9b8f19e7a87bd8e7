package pool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/quorumlock/quorumlock/internal/node"
)

// Pool is one independent Redis master as the lock coordinator sees it.
//
// Every method is safe for concurrent use, honours ctx's deadline and
// cancellation as far as the underlying client does, and returns an error
// only when the node could not give a definite answer (network failure,
// timeout, an error reply such as READONLY, OOM, NOPERM or WRONGTYPE). A
// definite "no" is false with a nil error.
//
// The Pools of this package are the only implementations most programs
// need. A Pool may be wrapped (for instrumentation or fault injection); a
// wrapper must keep the semantics stated on each method. Package redlock
// calls any Pool not of this package, a wrapper included, through these
// methods, one goroutine per call: correct, but slower under load.
type Pool interface {
	// Name identifies the node in errors and logs: its address unless set
	// with WithName. Names of the pools of one redlock.Client are unique.
	Name() string
	// Acquire sets key to token with the given TTL (whole milliseconds)
	// only if key is free (it does not exist, or holds a lock of a renewal
	// session that has ended) and reports whether it did; false means
	// another lock holds it. It also answers true when key already holds
	// token, so a retried call never answers "taken" to its own token.
	Acquire(ctx context.Context, key, token string, ttl time.Duration) (bool, error)
	// AcquireFenced is Acquire with a fencing counter: only if it sets key,
	// it increments the counter fenceKey in the same atomic step and returns
	// its new value (at least 1); when key already holds token it returns
	// the counter without a second increment; it returns 0 when another
	// value is there. When it fails with an error it has not set key, but
	// may have raised the counter. fenceKey may be shared by many keys and
	// must share key's Redis Cluster slot. A counter of key's own from
	// earlier versions (key + ":fence") is folded into fenceKey (raised
	// above it) and deleted, so that key's tokens keep increasing.
	AcquireFenced(ctx context.Context, key, fenceKey, token string, ttl time.Duration) (uint64, error)
	// RaiseFence sets the counter fenceKey to fence if it is lower, only
	// while key holds token, and reports whether key holds token.
	RaiseFence(ctx context.Context, key, fenceKey, token string, fence uint64) (bool, error)
	// Extend makes key live at least ttl more, only while it holds token,
	// and reports whether key holds token. It never creates the key and
	// never shortens its TTL, so an Extend that lands late cannot cut short
	// a later, longer one.
	Extend(ctx context.Context, key, token string, ttl time.Duration) (bool, error)
	// Release deletes key only while it holds token, announces the release
	// on the channel named after the key, and reports whether it deleted.
	Release(ctx context.Context, key, token string) (bool, error)
	// Get returns the value key holds, or "" when it does not exist: a
	// lock's token, or, for a lock of a renewal session, its token, the
	// byte 0x1f and the session's incarnation and prefix length (held only
	// while that session lives; docs/safety.md, "Renewal sessions").
	Get(ctx context.Context, key string) (string, error)
	// RunID returns the server's run_id from INFO server: it tells two
	// names for the same server apart from two servers, and changes when
	// the server restarts. It returns "" and no error when the server does
	// not report one (an error reply to INFO, as from servers that do not
	// implement it or ACL users without the right): the caller then cannot
	// compare identities. A temporary error reply (LOADING, BUSY,
	// MASTERDOWN, TRYAGAIN) is returned as an error: ask again later.
	RunID(ctx context.Context) (string, error)
	// Close releases what the Pool owns: the client it created in Dial or
	// DialURL, and the goroutines that write the commands package redlock
	// queued. Queued commands fail with redis.ErrClosed, and Close waits
	// for those in flight: they fail at once on the Pool's own client,
	// which it closes first; on a Pool from New, whose client stays open,
	// they run until answered or given up (docs/design.md, "Following a
	// command past its round"). A Pool from New never closes the caller's
	// client.
	Close() error
}

// Slotted is implemented by the Pools of this package. Slotted reports
// whether the Pool's client is a Redis Cluster client, whose scripts may
// only touch the keys of one hash slot: redlock then keeps a fencing counter
// per hash slot, else one per master.
type Slotted interface {
	Slotted() bool
}

var _ Slotted = (*redisPool)(nil)

// Slotted reports whether p's client is a *redis.ClusterClient.
func (p *redisPool) Slotted() bool {
	_, ok := p.c.(*redis.ClusterClient)
	return ok
}

// client is the part of go-redis a Pool needs.
type client interface {
	redis.Scripter
	Get(ctx context.Context, key string) *redis.StringCmd
	Info(ctx context.Context, section ...string) *redis.StringCmd
	Process(ctx context.Context, cmd redis.Cmder) error
	Pipeline() redis.Pipeliner
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
	Close() error
}

// Option configures a Pool in New, Dial and DialURL.
type Option func(*config) error

type config struct {
	name         string
	restartGuard time.Duration
	strict       bool
	eviction     EvictionCheck
	logger       *slog.Logger
	hooks        []redis.Hook // WithHooks
}

func defaults() config {
	return config{restartGuard: DefaultRestartGuard, eviction: EvictionWarn, logger: slog.New(slog.DiscardHandler)}
}

// WithName sets the name the Pool has in errors and logs; the names of the
// Pools of one redlock.Client must differ. The default is the server's
// address ("host:port"); for a Cluster client, its seed addresses, and for a
// Ring, its shards' addresses, sorted and joined by commas; for DialFailover,
// "sentinel:" and the master's name. A client from redis.NewFailoverClient
// (or a Cluster client without seed addresses) does not tell go-redis' users
// what it reaches: New refuses it without WithName. New and Dial return an
// error for an empty name.
func WithName(name string) Option {
	return func(c *config) error {
		if name == "" {
			return errors.New("pool: WithName: the name must not be empty")
		}
		c.name = name
		return nil
	}
}

type redisPool struct {
	name  string
	c     client
	owned bool
	b     batcher // commands sent by a redlock.Client's rounds
	bg    batcher // background commands (node.Op.Background)
	cs    *conns  // Dial's and DialFailover's connections; nil for New's
	w     warmer
}

var _ Pool = (*redisPool)(nil)

// New returns a Pool over a go-redis client the caller owns; closing the
// Pool leaves the client open. Set ContextTimeoutEnabled and MaxRetries −1
// on the client, as Dial does: without them a call may outlive the lock's
// per-node timeout and hold a connection until go-redis gives up (the lock
// is still decided on time), and a release go-redis sends again answers
// "not held", so Release may report a failed quorum that succeeded. The
// restart guard and the eviction check apply only if the client's
// redis.Options.OnConnect is the hook OnConnect returns.
//
// A client must send every command to masters: a replica cannot hold a
// lock, and a read there (Lock.Held, Client.Locked) can answer from a past
// the master has left. New refuses a ClusterClient that reads from
// replicas (ReadOnly, RouteByLatency, RouteRandomly); it cannot see the
// options of a redis.NewFailoverClient, whose ReplicaOnly, RouteByLatency
// and RouteRandomly must stay false (DialFailover checks them).
//
// New returns an error for a nil client, a ClusterClient that reads from
// replicas, an invalid option, or, when no WithName is given, a client it
// cannot name (see WithName).
func New(c redis.UniversalClient, opts ...Option) (Pool, error) {
	if c == nil {
		return nil, errors.New("pool: New: the client is nil; pass a *redis.Client (or another redis.UniversalClient) for one Redis master")
	}
	if cc, ok := c.(*redis.ClusterClient); ok {
		if o := cc.Options(); o.ReadOnly || o.RouteByLatency || o.RouteRandomly {
			return nil, errors.New("pool: New: the ClusterClient reads from replicas (ReadOnly, RouteByLatency or RouteRandomly), which cannot hold a lock and may answer from the past; leave them false")
		}
	}
	cfg := defaults()
	cfg.name = addrOf(c)
	if err := apply(&cfg, opts); err != nil {
		return nil, err
	}
	if len(cfg.hooks) > 0 {
		return nil, errors.New("pool: New: WithHooks is for Dial, DialURL and DialFailover; add hooks to a client you own with its AddHook")
	}
	if cfg.name == "" {
		return nil, unnamed(c)
	}
	return &redisPool{name: cfg.name, c: c}, nil
}

// Dial returns a Pool with a client of its own for the server that opt
// describes (copied; opt is not modified). The copy has ContextTimeoutEnabled
// set, MaxRetries −1 and DialerRetries 1 whatever opt says; DialTimeout,
// ReadTimeout, WriteTimeout and PoolTimeout left 0 become
// DefaultDialTimeout, DefaultIOTimeout (both) and the read timeout plus a
// second, not go-redis' defaults, and a nil MaintNotificationsConfig turns
// them off; every other field, such as Password,
// TLSConfig, Dialer or the pool sizes, is kept, but for PipelinePoolSize:
// left 0 with no pipeline buffer size set, it becomes −1, so that batches
// of one command and of several share one pool of connections (go-redis
// v9.23 otherwise opens a second pool for pipelines). Its connections outlive a
// process that was starved of CPU, and those it closes are counted (Stats).
// Dial does not connect: a server that is down shows up as a failed vote on
// first use. Once the server has answered for a second, the Pool sets up,
// in the background, the 4 connections its queues can use at once. Close
// the Pool to close its client.
//
// Every new connection is checked before use by the restart guard
// (WithRestartGuard, default DefaultRestartGuard) and the eviction check
// (WithEvictionCheck, default EvictionWarn), chained after any OnConnect hook
// opt has; a refused connection makes the node fail the lock operation that
// needed it, with an error that says why and what to do.
func Dial(opt *redis.Options, opts ...Option) (Pool, error) {
	if opt == nil {
		return nil, errors.New("pool: Dial: the options are nil; pass &redis.Options{Addr: \"host:port\"}")
	}
	o := *opt
	if o.Addr == "" && o.Network != "unix" {
		return nil, errors.New("pool: Dial: the address is empty; set redis.Options.Addr to \"host:port\"")
	}
	o.ContextTimeoutEnabled = true
	o.MaxRetries = -1
	o.DialerRetries = 1
	pin(&o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.PoolTimeout)
	onePool(&o.PipelinePoolSize, o.PipelineReadBufferSize, o.PipelineWriteBufferSize)
	if o.MaintNotificationsConfig == nil { // go-redis' "auto" costs each set-up a round trip
		o.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	}
	cfg := defaults()
	cfg.name = o.Addr
	if err := apply(&cfg, opts); err != nil {
		return nil, err
	}
	cs := cfg.conns(o.DialTimeout)
	if o.Dialer == nil {
		o.Dialer = redis.NewDialer(&o)
	}
	o.Dialer = cs.dialer(o.Dialer)
	newGuard(&cfg).install(&o)
	c := redis.NewClient(&o)
	c.AddHook(dialHook{}) // lets Close of a subscription end its connection setup
	for _, h := range cfg.hooks {
		c.AddHook(h)
	}
	return &redisPool{name: cfg.name, c: c, owned: true, cs: cs}, nil
}

// DialFailover returns a Pool with a client of its own for the master that
// opt's Sentinels name (opt is copied, not modified), named "sentinel:" and
// opt.MasterName unless WithName is given; independent Sentinel groups that
// use one master name (Sentinel's example configuration calls it
// "mymaster") need WithName, or redlock.New refuses them as one node. The
// client is set up as Dial's (ContextTimeoutEnabled, MaxRetries −1,
// DialerRetries 1, the timeouts, Stats, WithHooks, and the restart guard and
// eviction check on the master's connections, not the Sentinels') and sends
// every command to the master.
// A failover to a replica can lose locks on this node: docs/safety.md,
// "Replica failover", says when that is safe. Like Dial it does not
// connect; close the Pool to close its client.
//
// It returns an error for nil options, an empty MasterName or SentinelAddrs,
// a routing to replicas (ReplicaOnly, RouteByLatency, RouteRandomly: a
// replica cannot hold a lock), or an invalid option.
func DialFailover(opt *redis.FailoverOptions, opts ...Option) (Pool, error) {
	switch {
	case opt == nil:
		return nil, errors.New("pool: DialFailover: the options are nil; pass &redis.FailoverOptions{MasterName: ..., SentinelAddrs: ...}")
	case opt.MasterName == "" || len(opt.SentinelAddrs) == 0:
		return nil, errors.New("pool: DialFailover: set redis.FailoverOptions.MasterName and SentinelAddrs: the master's name and its Sentinels' \"host:port\" addresses")
	case opt.ReplicaOnly || opt.RouteByLatency || opt.RouteRandomly:
		return nil, errors.New("pool: DialFailover: ReplicaOnly, RouteByLatency and RouteRandomly send commands to replicas, which cannot hold a lock; leave them false")
	}
	o := *opt
	o.ContextTimeoutEnabled = true
	o.MaxRetries = -1
	o.DialerRetries = 1
	pin(&o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.PoolTimeout)
	onePool(&o.PipelinePoolSize, o.PipelineReadBufferSize, o.PipelineWriteBufferSize)
	cfg := defaults()
	cfg.name = "sentinel:" + o.MasterName
	if err := apply(&cfg, opts); err != nil {
		return nil, err
	}
	cs := cfg.conns(o.DialTimeout)
	if o.Dialer == nil { // go-redis' own for the master, for the Sentinels too
		o.Dialer = redis.NewDialer(&redis.Options{DialTimeout: o.DialTimeout, TLSConfig: o.TLSConfig})
	}
	o.Dialer = cs.dialer(o.Dialer)
	o.OnConnect = masterGuard(&cfg, o.OnConnect)
	c := redis.NewFailoverClient(&o)
	c.AddHook(dialHook{})
	for _, h := range cfg.hooks {
		c.AddHook(h)
	}
	return &redisPool{name: cfg.name, c: c, owned: true, cs: cs}, nil
}

// masterGuard is the OnConnect of DialFailover's client: user's hook (if
// any) on every connection, then the restart guard and eviction check on
// connections to the master only. go-redis runs FailoverOptions.OnConnect on
// its connections to the Sentinels too, whose run_id and uptime are not the
// master's; the master's connections are those of the client whose address
// is failoverAddr (a go-redis Conn names its client's address in String).
func masterGuard(cfg *config, user func(context.Context, *redis.Conn) error) func(context.Context, *redis.Conn) error {
	var g redis.Options
	newGuard(cfg).install(&g)
	check := g.OnConnect
	if check == nil {
		return user
	}
	return func(ctx context.Context, cn *redis.Conn) error {
		if user != nil {
			if err := user(ctx, cn); err != nil {
				return err
			}
		}
		if !strings.Contains(cn.String(), "<"+failoverAddr+" ") {
			return nil // a Sentinel
		}
		return check(ctx, cn)
	}
}

// DialURL is Dial for a URL such as "redis://user:password@host:6379/0" or
// "rediss://host:6380" (TLS), as parsed by redis.ParseURL. The Pool's
// default name is the URL's host:port, never its password. A URL that
// does not parse is an error; one without a scheme ("host:port") says to
// write "redis://host:port".
func DialURL(url string, opts ...Option) (Pool, error) {
	o, err := redis.ParseURL(url)
	if err != nil && !strings.Contains(url, "://") {
		return nil, fmt.Errorf("pool: DialURL(%q): not a URL; write redis://%s (or rediss:// for TLS), or use Dial with redis.Options{Addr: %q}", url, url, url)
	}
	if err != nil {
		return nil, fmt.Errorf("pool: DialURL: %w", err)
	}
	return Dial(o, opts...)
}

func apply(cfg *config, opts []Option) error {
	for _, o := range opts {
		if o == nil {
			return errors.New("pool: an option is nil")
		}
		if err := o(cfg); err != nil {
			return err
		}
	}
	return nil
}

// failoverAddr is the Addr of the options of every client from
// redis.NewFailoverClient: go-redis keeps the master's name to itself.
const failoverAddr = "FailoverClient"

// addrOf is the default name of a Pool over c (WithName), "" when c does
// not tell what it reaches.
func addrOf(c redis.UniversalClient) string {
	switch c := c.(type) {
	case *redis.Client:
		if a := c.Options().Addr; a != failoverAddr {
			return a
		}
	case *redis.ClusterClient:
		return joinSorted(slices.Clone(c.Options().Addrs))
	case *redis.Ring:
		addrs := make([]string, 0, len(c.Options().Addrs))
		for _, a := range c.Options().Addrs {
			addrs = append(addrs, a)
		}
		return joinSorted(addrs)
	}
	return ""
}

func joinSorted(addrs []string) string {
	slices.Sort(addrs)
	return strings.Join(addrs, ",")
}

// unnamed is New's error for a client addrOf cannot name.
func unnamed(c redis.UniversalClient) error {
	switch c := c.(type) {
	case *redis.Client: // addrOf names every other one
		return fmt.Errorf("pool: New: a client from redis.NewFailoverClient does not tell which master it follows (go-redis names every one %q), so the Pools of several Sentinel-managed masters cannot be told apart; use pool.DialFailover, or name the pool with pool.WithName(\"sentinel:\" + masterName)", failoverAddr)
	case *redis.ClusterClient:
		return errors.New("pool: New: the Cluster client has no seed addresses (as from redis.NewFailoverClusterClient); name the pool with pool.WithName, one name per cluster")
	default:
		return fmt.Errorf("pool: New: cannot tell the address of a %T; name the pool with pool.WithName", c)
	}
}

func (p *redisPool) Name() string { return p.name }

// KeepsStallClock is node.StallClocked: every call and batch of a Pool of
// this package waits by the stall clock.
func (p *redisPool) KeepsStallClock() bool { return true }

// run runs op on the node synchronously: the path of callers that do not
// queue (the Pool methods below), with the same wire format as the queue.
func (p *redisPool) run(ctx context.Context, o node.Op) node.Result {
	ctx, done := patient(ctx)
	defer done()
	op := node.New(o)
	cmd := p.cmd(ctx, op)
	_ = p.c.Process(ctx, cmd)
	r := op.Result(cmd)
	if node.NoScript(r) {
		r = op.Eval(ctx, p.c) // after a restart or SCRIPT FLUSH
	}
	return r
}

// cmd is op as the command this Pool sends.
func (p *redisPool) cmd(ctx context.Context, op *node.Op) redis.Cmder {
	return op.Cmd(ctx)
}

func (p *redisPool) Acquire(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	r := p.run(ctx, node.Op{Kind: node.Acquire, Key: key, Token: token, TTL: ttl})
	return r.Int == 1, r.Err
}

func (p *redisPool) AcquireFenced(ctx context.Context, key, fenceKey, token string, ttl time.Duration) (uint64, error) {
	r := p.run(ctx, node.Op{Kind: node.AcquireFenced, Key: key, FenceKey: fenceKey, Token: token, TTL: ttl})
	if r.Err != nil {
		return 0, r.Err
	}
	return uint64(r.Int), nil
}

func (p *redisPool) RaiseFence(ctx context.Context, key, fenceKey, token string, fence uint64) (bool, error) {
	r := p.run(ctx, node.Op{Kind: node.RaiseFence, Key: key, FenceKey: fenceKey, Token: token, Fence: fence})
	return r.Int == 1, r.Err
}

func (p *redisPool) Extend(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	r := p.run(ctx, node.Op{Kind: node.Extend, Key: key, Token: token, TTL: ttl})
	return r.Int == 1, r.Err
}

func (p *redisPool) Release(ctx context.Context, key, token string) (bool, error) {
	r := p.run(ctx, node.Op{Kind: node.Release, Key: key, Token: token})
	return r.Int == 1, r.Err
}

func (p *redisPool) Get(ctx context.Context, key string) (string, error) {
	r := p.run(ctx, node.Op{Kind: node.Get, Key: key})
	return r.Str, r.Err
}

func (p *redisPool) RunID(ctx context.Context) (string, error) {
	ctx, done := patient(ctx)
	defer done()
	info, err := p.c.Info(ctx, "server").Result()
	if err != nil {
		var rerr redis.Error
		if errors.As(err, &rerr) && !errors.Is(err, redis.Nil) && !transient(err) {
			return "", nil // the server answered, but will not say who it is
		}
		return "", err
	}
	return infoFields(info)["run_id"], nil
}

// transient reports error replies of a server that will answer INFO once it
// is ready: asking again later may get its run_id.
func transient(err error) bool {
	for _, prefix := range []string{"LOADING", "BUSY", "MASTERDOWN", "TRYAGAIN"} {
		if redis.HasErrorPrefix(err, prefix) {
			return true
		}
	}
	return false
}

func (p *redisPool) Close() error {
	var err error
	if p.owned {
		if p.cs != nil {
			p.cs.closing.Store(true) // its closes are no news
		}
		p.w.stop()
		err = p.c.Close()
		p.w.wg.Wait()
	}
	p.b.stop() // after the client: a batch in flight then fails at once
	p.bg.stop()
	return err
}
