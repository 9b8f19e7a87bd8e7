package redlock

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorumlock/quorumlock/internal/conf"
	"github.com/quorumlock/quorumlock/internal/health"
	"github.com/quorumlock/quorumlock/internal/ident"
	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/internal/owed"
	"github.com/quorumlock/quorumlock/internal/plain"
	"github.com/quorumlock/quorumlock/internal/quorum"
	"github.com/quorumlock/quorumlock/internal/session"
	"github.com/quorumlock/quorumlock/internal/stall"
	"github.com/quorumlock/quorumlock/internal/tokens"
	"github.com/quorumlock/quorumlock/internal/wake"
	"github.com/quorumlock/quorumlock/pool"
)

// Client acquires locks on a quorum of independent Redis masters. Every
// method is safe for concurrent use; one Client per process and set of
// masters is enough. It never closes the pools.
type Client struct {
	pools   []pool.Pool
	senders []node.Sender // pools[i] as a node.Sender, or nil: called on goroutines
	queued  bool          // every pool is a node.Sender
	slotted bool          // some pool is a Redis Cluster: fencing counters per hash slot
	handoff bool          // queued and not slotted: the nodes keep lines of waiters (landing.go leaves them)
	call    quorum.Call   // runs an op through a Pool's methods
	cfg     *conf.Config

	mu      sync.RWMutex
	closed  bool
	held    map[*Lock]struct{}               // locks neither released nor lost, for Close
	claims  tokens.Claims                    // generated tokens held or being tried, per key
	watches map[*context.CancelFunc]struct{} // Observe loops, which Close ends
	sweepAt int                              // forget expired locks in held at this size...
	sweptAt time.Time                        // ...or a second after the last time
	// wg counts every operation under way (enter) and every goroutine and
	// command the Client started, so that Close waits for them. Its rule:
	// wg.Add only while holding a count (an operation's, between enter and
	// its Done, or that of the goroutine or command being handled), so that
	// no Add races with Close's Wait.
	wg      sync.WaitGroup
	closeBy atomic.Int64 // once Close began: when its bound ends (Unix ns); no background command outlives it

	ids    *ident.Nodes   // which nodes are verified to be distinct servers
	gates  wake.Gates     // one acquisition round per key at a time
	notes  *wake.Notifier // wakes waiting Lock calls on releases
	names  *wake.Names    // names this Client's waiters, where handoff (else nil)
	later  owed.Later     // owed commands to send again; Close sends them at once
	owed   owed.Env       // how owed commands reach the nodes
	renew  renewer        // renews auto-extended locks
	health *health.Log    // logs nodes' outages once each (nil: no logger)

	sessMu   sync.Mutex
	sessions map[session.Key]*session.Session // renewal sessions, made on first use
}

// New returns a Client over pools, one per independent Redis master, without
// I/O; an error for no pools, a nil pool, two pools of one name (address),
// or an invalid option. Pools that reach one server under two names make
// every operation fail, naming them, from their first use.
func New(pools []pool.Pool, opts ...Option) (*Client, error) {
	if len(pools) == 0 {
		return nil, errors.New("redlock: New: no pools; pass one pool.Pool per independent Redis master (at least 3 to survive one failure, 5 recommended)")
	}
	if err := checkPools(pools); err != nil {
		return nil, err
	}
	base := defaultConfig()
	cfg, err := conf.Apply(&base, len(pools), opts)
	if err != nil {
		return nil, err
	}
	if cfg == &base {
		if err := cfg.Check(len(pools)); err != nil {
			return nil, err
		}
	}
	c := &Client{
		pools: append([]pool.Pool(nil), pools...),
		cfg:   cfg,
		held:  make(map[*Lock]struct{}),
	}
	c.senders = make([]node.Sender, len(pools))
	c.queued = true
	for i, p := range pools {
		c.senders[i], _ = p.(node.Sender)
		c.queued = c.queued && c.senders[i] != nil
		if sp, ok := p.(pool.Slotted); ok && sp.Slotted() {
			c.slotted = true
		}
	}
	c.handoff = c.queued && !c.slotted
	c.call = c.callPool
	c.names, c.notes = newNotifier(cfg, pools, c.handoff)
	c.renew.init(c)
	c.health = health.New(cfg.Logger, poolNames(pools))
	c.owed = owed.Env{Senders: c.senders, Send: c.sendWithin, WG: &c.wg, Later: &c.later, Failed: c.health.Failed, Answered: c.health.Answered}
	c.ids = ident.New(ident.Config{Names: poolNames(pools), Health: c.health, Logger: cfg.Logger, Go: c.wg.Go, Bound: checkBound(pools),
		RunID: func(ctx context.Context, i int) (string, error) { return c.pools[i].RunID(ctx) }})
	return c, nil
}

// checkBound is what bounds an identity check: the stall clock when a Pool
// keeps it (node.StallClocked: package pool's, and wrappers that say so),
// so that a check under way when the process stood still goes on; the wall
// clock for other Pools (fakes, the simulator).
func checkBound(pools []pool.Pool) func(context.Context, time.Duration) (context.Context, context.CancelFunc) {
	for _, p := range pools {
		if s, ok := p.(node.StallClocked); ok && s.KeepsStallClock() {
			return stall.WithTimeout
		}
	}
	return context.WithTimeout
}

// checkPools refuses a nil pool and two pools of one name. Only two
// different Pools whose names are not addresses may be two masters given
// the same name (WithName); the same Pool twice, or two Pools of one address,
// are one server counted twice, which a new name would only hide.
func checkPools(pools []pool.Pool) error {
	seen := make(map[string]int, len(pools))
	for i, p := range pools {
		if p == nil {
			return fmt.Errorf("redlock: New: pool %d is nil", i)
		}
		j, dup := seen[p.Name()]
		seen[p.Name()] = i
		switch {
		case !dup:
		case samePool(p, pools[j]):
			return fmt.Errorf("redlock: New: pools %d and %d are the same Pool (%q): a server counted twice breaks the quorum; pass each Redis master's Pool once", j, i, p.Name())
		case isAddr(p.Name()):
			return fmt.Errorf("redlock: New: pools %d and %d both reach %s: a server counted twice breaks the quorum; pass one Pool per independent Redis master", j, i, p.Name())
		default:
			return fmt.Errorf("redlock: New: pools %d and %d are both named %q: each pool must be a different Redis master (if they are, give each a distinct name with pool.WithName)", j, i, p.Name())
		}
	}
	return nil
}

// samePool reports whether a and b are one Pool (false for Pools of a type
// that cannot be compared).
func samePool(a, b pool.Pool) bool {
	return reflect.TypeOf(a) == reflect.TypeOf(b) && reflect.TypeOf(a).Comparable() && a == b
}

// isAddr reports whether name is a host:port address, as a Pool's name is
// unless set with pool.WithName.
func isAddr(name string) bool {
	_, port, err := net.SplitHostPort(name)
	if err != nil {
		return false
	}
	_, err = strconv.ParseUint(port, 10, 16)
	return err == nil
}

// callPool runs op on pool i through its synchronous methods: the path of
// Pools that do not queue commands (node.Sender), such as wrappers.
func (c *Client) callPool(ctx context.Context, i int, op *node.Op) node.Result {
	return plain.Call(ctx, c.pools[i], op)
}

// enter registers an operation so that Close waits for it and for every
// goroutine it starts; it fails once the Client is closed. Every successful
// enter must be paired with c.wg.Done.
func (c *Client) enter() error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return ErrClosed
	}
	c.wg.Add(1)
	return nil
}

// enterRound enters an operation that runs rounds (enter) and checks the
// nodes' identities for it; on success the caller pairs it with c.wg.Done.
func (c *Client) enterRound(ctx context.Context, cfg *conf.Config) error {
	if err := c.enter(); err != nil {
		return err
	}
	if err := c.ids.Check(ctx, c.idBounds(cfg)); err != nil {
		c.wg.Done()
		return err
	}
	return nil
}

// idBounds are the bounds of the identity check of an operation under cfg.
func (c *Client) idBounds(cfg *conf.Config) ident.Bounds {
	return ident.Bounds{Quorum: cfg.QuorumOf(len(c.pools)), NodeTimeout: cfg.NodeTimeout, Recheck: cfg.Recheck}
}

// Close releases the Client's locks still held, waits for its background
// work and makes every later call return ErrClosed (it does not close the
// pools), within the node timeout + min(TTL, max(10 × node timeout, 2 s))
// (longer only while a call under way has longer bounds of its own). It
// returns the errors of releases the nodes did not confirm (not of expired
// locks), or ErrClosed if called again. Concurrent calls not yet at their
// I/O return ErrClosed, as does an acquisition won meanwhile (rolled back).
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	c.closed = true
	c.closeBy.Store(time.Now().Add(closeBound(c.cfg)).UnixNano())
	locks := make([]*Lock, 0, len(c.held))
	for l := range c.held {
		locks = append(locks, l)
	}
	c.held = nil
	c.claims.Reset()
	for stop := range c.watches {
		(*stop)()
	}
	c.watches = nil
	c.wg.Add(1) // Close's own share: the releases below add to wg
	c.mu.Unlock()
	var notes sync.WaitGroup
	notes.Go(c.notes.Close) // beside the releases: a subscription's set-up may take a budget
	c.renew.close()         // renewals under way end before their locks are released
	errs := c.releaseAll(locks)
	c.later.Stop(&c.wg) // pending re-sends go now, once
	c.wg.Done()
	c.wg.Wait()
	notes.Wait()
	return errors.Join(errs...)
}

// closeBound is how long Close takes at most: the releases it sends are
// followed for a cleanup budget after their node timeout, and every
// background command sent after Close began ends with them (bgDeadline).
func closeBound(cfg *conf.Config) time.Duration {
	return cfg.NodeTimeout + cfg.CleanupTimeout()
}

// releaseAll releases locks for Close, in parallel, and returns the errors
// worth reporting.
func (c *Client) releaseAll(locks []*Lock) []error {
	errs := make([]error, len(locks))
	var g sync.WaitGroup
	for i, l := range locks {
		g.Go(func() {
			l.op <- struct{}{}
			defer func() { <-l.op }()
			err := l.releaseLocked(context.Background())
			var qe *QuorumError
			if errors.Is(err, ErrReleased) || errors.As(err, &qe) && qe.gone() {
				err = nil // released meanwhile, or expired: nothing to report
			}
			errs[i] = err
		})
	}
	g.Wait()
	return errs
}

// bgDeadline is the deadline of a command nobody waits for, sent now for a
// call of cfg: a cleanup budget from now (deadlineIn).
func (c *Client) bgDeadline(cfg *conf.Config) time.Time { return c.deadlineIn(cfg.CleanupTimeout()) }

// deadlineIn is the deadline of a command nobody waits for, bounded by
// bound from now: never past Close's bound once Close has begun.
func (c *Client) deadlineIn(bound time.Duration) time.Time {
	d := time.Now().Add(bound)
	if by := c.closeBy.Load(); by != 0 && d.UnixNano() > by {
		d = time.Unix(0, by)
	}
	return d
}

// sendWithin is sendOwn bounded by bound from now (deadlineIn): how owed
// commands reach the nodes (owed.Env).
func (c *Client) sendWithin(o node.Op, bound time.Duration, i int, rcv node.Receiver) {
	c.sendOwn(o, c.deadlineIn(bound), i, rcv)
}

// callConfig applies per-call options and checks the key.
func (c *Client) callConfig(op, key string, opts []Option) (*conf.Config, error) {
	if key == "" {
		return nil, fmt.Errorf("redlock: %s: the key is empty; name the resource the lock protects", op)
	}
	cfg, err := conf.Apply(c.cfg, len(c.pools), opts)
	if err != nil {
		return nil, err
	}
	if err := checkTag(cfg, key); err != nil {
		return nil, fmt.Errorf("redlock: %s: %w", op, err)
	}
	return cfg, nil
}

// acquireConfig is callConfig for an acquisition of key, which may be a
// shared holder's (Shared).
func (c *Client) acquireConfig(key string, opts []Option) (*conf.Config, error) {
	cfg, err := c.callConfig("acquire", key, opts)
	if err != nil {
		return nil, err
	}
	if why := refused(cfg, shapeOne, c.handoff); why != "" {
		return nil, fmt.Errorf("redlock: acquire %q: %s", key, why)
	}
	return cfg, nil
}

// redisKey is the Redis key of the lock named key: prefix{key}. The keys a
// lock's scripts form from it (its line of waiters, a per-slot fencing
// counter, a semaphore's permits) extend it or share its hash slot, so
// checkTag must have accepted key.
func (c *Client) redisKey(cfg *conf.Config, key string) string {
	return node.RedisKey(cfg.Prefix, key)
}

// fenceKey is the fencing counter of the lock key rkey for cfg: the key's
// own for an election (docs/safety.md, "Leader election": its term is read
// back from it), else the Client's (node.FenceKey).
func (c *Client) fenceKey(cfg *conf.Config, rkey string) string {
	if cfg.Election {
		return node.OwnFence(rkey)
	}
	return node.FenceKey(cfg.Prefix, rkey, c.slotted)
}

// checkTag returns an error when the Redis key of key under cfg's prefix
// has no hash tag: a key that begins with '}' (prefix{}...}), or a prefix
// that ends a tag of its own; or when the prefix opens a tag it does not
// close ("app{"), which gives the lock key a tag that runs into the key and
// the keys formed from the prefix another. Redis Cluster (and a Ring) would
// place them in different slots, and a script that touches the lock key and
// a key formed with it would fail with CROSSSLOT. Such keys are refused on
// every kind of Pool, so that a name that works in a test on one server
// works on a Cluster.
func checkTag(cfg *conf.Config, key string) error {
	if i := strings.IndexByte(cfg.Prefix, '{'); i >= 0 && strings.IndexByte(cfg.Prefix[i+1:], '}') < 0 {
		return fmt.Errorf("the key prefix %q opens a Redis Cluster hash tag that it does not close, so the lock's keys could land in different slots; close it in the prefix (WithKeyPrefix(\"{app}:\")) or use a prefix without '{'", cfg.Prefix)
	}
	rkey := node.RedisKey(cfg.Prefix, key)
	if _, ok := node.HashTag(rkey); ok {
		return nil
	}
	if strings.HasPrefix(key, "}") && !strings.ContainsAny(cfg.Prefix, "{}") {
		return fmt.Errorf("the key %q begins with '}': its Redis key %q would have an empty Redis Cluster hash tag, and the lock's keys could land in different slots; use a key that does not begin with '}'", key, rkey)
	}
	return fmt.Errorf("the key prefix %q and the key %q form the Redis key %q, which has no Redis Cluster hash tag, so the lock's keys could land in different slots; use a key prefix without '{' or '}' (WithKeyPrefix), and a key that does not begin with '}'", cfg.Prefix, key, rkey)
}

// Locked reports whether some client holds key: one token is on a quorum of
// nodes. It returns false and nil when the answers show no token can be,
// and false and a *QuorumError (matching ctx.Err() too if ctx ended first)
// when too few nodes answered to tell. It writes nothing on the nodes.
func (c *Client) Locked(ctx context.Context, key string, opts ...Option) (bool, error) {
	cfg, err := c.callConfig("locked", key, opts)
	if err != nil {
		return false, err
	}
	if err := c.enterRound(ctx, cfg); err != nil {
		return false, err
	}
	defer c.wg.Done()
	rd := c.run(ctx, cfg, send{spec: opLocked, o: node.Op{Key: c.redisKey(cfg, key)}})
	best, answered, sessions := rd.tallyTokens()
	if sessions { // only a script tells whether a session lock is held
		rd.finish(nil)
		rd = c.run(ctx, cfg, send{spec: opLockedPeek, o: node.Op{Key: c.redisKey(cfg, key)}})
		best, answered, _ = rd.tallyTokens()
	}
	defer rd.finish(nil)
	n := len(c.pools)
	switch {
	case best >= rd.q:
		return true, nil
	case best+n-answered < rd.q: // no token can be on a quorum
		return false, nil
	}
	return false, withCaller(ctx, rd.quorumError(key))
}

// tallyTokens is Locked's vote: it reads GET replies until settled (one
// token on a quorum; no token can be on one even if every unsure node held
// it; or neither can change any more) and returns the most nodes that hold
// one token and how many nodes answered; sessions, when a reply was a
// session lock's value, which a GET cannot tell held or free.
func (rd *round) tallyTokens() (best, answered int, sessions bool) {
	n, q, pending := len(rd.res), rd.q, rd.r.Pending()
	tally := make(map[string]int, 2)
	for pending > 0 && best < q && best+n-answered >= q && (best+pending >= q || best+n-answered-pending < q) {
		rep, ok := rd.r.Next()
		if !ok {
			break
		}
		pending--
		if rep.Err != nil {
			rd.res[rep.Node] = failedResult(rep.Node, rd.c, rep.Err, rep.Latency)
			continue
		}
		answered++
		rd.res[rep.Node] = NodeResult{Node: rd.res[rep.Node].Node, Outcome: OutcomeOK, Latency: rep.Latency}
		if node.SessionValue(rep.Str) {
			return 0, 0, true
		}
		if rep.Str != "" && !node.HandedValue(rep.Str) { // a key handed to a waiter is held by no lock
			tally[rep.Str]++
			best = max(best, tally[rep.Str])
		}
	}
	return best, answered, false
}

// poolNames returns the names of pools, by index.
func poolNames(pools []pool.Pool) []string {
	names := make([]string, len(pools))
	for i, p := range pools {
		names[i] = p.Name()
	}
	return names
}

// unclaim ends the claims of token on the keys each visits, made under cfg
// (only tokens of the caller's generator are claimed: attemptToken).
func (c *Client) unclaim(cfg *conf.Config, each func(func(rkey string)), token string) {
	if cfg.CustomToken {
		c.claims.Unclaim(each, token)
	}
}

// sendOwn sends o, a command the Client sends on its own (nobody waits for
// its reply: a background release, a waiter leaving a line, a session's
// renewal), to node i, bounded by deadline; rcv gets its result, and must
// call c.wg.Done once it has (the command is counted in c.wg, so that Close
// waits for it). It goes through the node's queue, or, for a Pool that has
// none, a call on a goroutine. The caller must hold a count on c.wg.
func (c *Client) sendOwn(o node.Op, deadline time.Time, i int, rcv node.Receiver) {
	o.Background, o.Values = true, ownWork
	op := node.New(o)
	c.wg.Add(1)
	if s := c.senders[i]; s != nil {
		s.Send(op, deadline, rcv, i)
		return
	}
	go func() {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		defer cancel()
		rcv.Deliver(i, c.call(ctx, i, op))
	}()
}

// ownWork is the context whose values the commands the Client sends on its
// own carry (background releases, leaving lines): none of a caller's, whose
// context may be recycled once its call returned (pool.WithHooks). Its one
// value marks them for tests.
var ownWork = context.WithValue(context.Background(), ownWorkKey{}, true)

type ownWorkKey struct{}

// newNotifier returns the namer of a Client's waiters (nil unless the
// nodes keep lines: handoff) and its Notifier, which subscribes through
// the Pools that are node.Subscribers.
func newNotifier(cfg *conf.Config, pools []pool.Pool, handoff bool) (*wake.Names, *wake.Notifier) {
	var names *wake.Names
	client := ""
	if handoff {
		var b [12]byte
		cfg.Rnd.Read(b[:])
		client = base64.RawURLEncoding.EncodeToString(b[:])
		names = wake.NewNames(client)
	}
	subs := make([]node.Subscriber, len(pools))
	for i, p := range pools {
		subs[i], _ = p.(node.Subscriber)
	}
	return names, wake.New(wake.Config{
		Quorum: cfg.QuorumOf(len(pools)), Client: client, RetryMax: cfg.RetryMax,
		Random: cfg.Rnd.Duration, Subscribers: subs,
		// A connection set-up gets the time of a background command, which
		// also dials anew: Close stays within its stated bound even where
		// a Pool cannot end a set-up early.
		Setup: cfg.CleanupTimeout(), Timeout: cfg.NodeTimeout,
	})
}

// grace is the Grace of cfg's releases: Config.HandGrace where the nodes keep
// lines, else 0 (no hand-off).
func (c *Client) grace(cfg *conf.Config) time.Duration {
	if !c.handoff {
		return 0
	}
	return cfg.HandGrace()
}
