package pool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultRestartGuard is the restart guard of Dial and DialURL: a server
// that restarted counts towards quorums again only once it has been up this
// long (see WithRestartGuard). It covers locks whose TTL plus drift
// allowance is below it, such as the default 10 s TTL of package redlock;
// raise it with WithRestartGuard for longer TTLs.
const DefaultRestartGuard = 30 * time.Second

// ErrRestarted marks the error of a connection refused by the restart guard:
// the server restarted less than the guard's duration ago, so it may have
// forgotten lock keys that have not yet expired (see WithRestartGuard).
var ErrRestarted = errors.New("the Redis server restarted too recently to count towards a quorum")

// ErrEvictionPolicy marks the error of a connection refused by the eviction
// check in EvictionRefuse mode: the server's maxmemory-policy may evict lock
// keys before their TTL ends.
var ErrEvictionPolicy = errors.New("the Redis server's maxmemory-policy may evict lock keys")

// EvictionCheck says what a Pool does when a server's maxmemory-policy is
// not noeviction: any other policy lets Redis drop lock keys (every policy
// but noeviction evicts keys with a TTL) before they expire, and a dropped
// key lets a second holder in.
type EvictionCheck int

const (
	// EvictionWarn logs a warning, once per server and policy, and goes on.
	// It is the default.
	EvictionWarn EvictionCheck = iota
	// EvictionRefuse refuses every connection to such a server: the node
	// never counts towards a quorum until its policy is changed.
	EvictionRefuse
	// EvictionIgnore skips the check.
	EvictionIgnore
)

func (e EvictionCheck) String() string {
	switch e {
	case EvictionWarn:
		return "warn"
	case EvictionRefuse:
		return "refuse"
	case EvictionIgnore:
		return "ignore"
	}
	return fmt.Sprintf("EvictionCheck(%d)", int(e))
}

// WithRestartGuard sets how long a restarted server must have been up again
// before a Pool made by Dial or DialURL uses it (default
// DefaultRestartGuard; 0 turns the guard off; a negative d is an error).
//
// A Redis server restarted without its data has forgotten the lock keys it
// held, and could let a second client take a lock that a quorum counting it
// believes taken; Redlock's authors close that hole with delayed restarts,
// and the guard enforces the delay from the client's side. While a restarted
// server has been up less than d, every connection to it is refused with an
// error wrapping ErrRestarted: the node answers no lock operation and counts
// as failed. Set d above the longest TTL plus drift allowance of any lock you
// take: by then every key the server forgot would have expired anyway.
//
// A server the Pool meets for the first time is used whatever its uptime,
// unless WithStrictRestartGuard is given. A server whose INFO does not
// report its uptime (an in-process fake, a proxy that hides INFO) cannot be
// guarded and is used. docs/design.md, "Connection checks", has the
// mechanism.
func WithRestartGuard(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("pool: WithRestartGuard(%v): the duration must not be negative (0 turns the guard off)", d)
		}
		c.restartGuard = d
		return nil
	}
}

// WithStrictRestartGuard makes the restart guard apply to servers the Pool
// meets for the first time too: a server whose uptime is below the guard is
// refused even when this Pool never saw it before. It closes the gap of a
// client that starts while a node is freshly restarted, at the cost that a
// freshly deployed cluster serves no lock for the guard's duration.
func WithStrictRestartGuard() Option {
	return func(c *config) error {
		c.strict = true
		return nil
	}
}

// WithEvictionCheck sets what a Pool made by Dial or DialURL does when a
// server's maxmemory-policy is not noeviction (default EvictionWarn). The
// check rides on the same INFO as the restart guard: it costs nothing per
// lock operation. An unknown mode is an error.
func WithEvictionCheck(mode EvictionCheck) Option {
	return func(c *config) error {
		if mode < EvictionWarn || mode > EvictionIgnore {
			return fmt.Errorf("pool: WithEvictionCheck(%v): unknown mode", mode)
		}
		c.eviction = mode
		return nil
	}
}

// WithLogger sets where a Pool logs what its callers do not see in return
// values: a restart it noticed (warn, once per restart), a maxmemory-policy
// that can evict lock keys (warn, once per policy) and a server it cannot
// guard (debug, once). The default logs nothing, as package redlock's
// Client does; pass the logger you give redlock.WithLogger. A nil logger is
// an error.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return errors.New("pool: WithLogger: the logger is nil")
		}
		c.logger = l
		return nil
	}
}

// OnConnect returns the connection hook that Dial installs, for programs that
// build their own go-redis clients and wrap them with New: set it as
// redis.Options.OnConnect (or call it from your own hook) to get the restart
// guard and the eviction check with the given options (WithRestartGuard,
// WithEvictionCheck, WithLogger, WithName for the logs). The hook is safe for
// concurrent use by all connections of one client; use one hook per server,
// since it remembers the server's run_id (on a ClusterClient, one per
// master through redis.ClusterOptions.NewClient: docs/deployments.md). Do not set it on
// redis.FailoverOptions: go-redis runs that hook on its Sentinel connections
// too, whose run_id is the Sentinel's; use DialFailover. OnConnect returns an
// error for an invalid option.
func OnConnect(opts ...Option) (func(ctx context.Context, cn *redis.Conn) error, error) {
	cfg := defaults()
	if err := apply(&cfg, opts); err != nil {
		return nil, err
	}
	return newGuard(&cfg).onConnect, nil
}

// guard checks each new connection of one server (see WithRestartGuard and
// WithEvictionCheck).
type guard struct {
	name     string
	restart  time.Duration
	strict   bool
	eviction EvictionCheck
	log      *slog.Logger

	mu       sync.Mutex
	runID    string          // the server's run_id when last seen
	suspect  bool            // runID was met as a restart (or strictly)
	warned   map[string]bool // eviction policies already logged
	unknown  bool            // "cannot guard" already logged
	previous func(context.Context, *redis.Conn) error
}

func newGuard(cfg *config) *guard {
	return &guard{name: cfg.name, restart: cfg.restartGuard, strict: cfg.strict, eviction: cfg.eviction, log: cfg.logger, warned: map[string]bool{}}
}

// install makes g run on every new connection of o, after any hook o had.
func (g *guard) install(o *redis.Options) {
	if g.restart == 0 && g.eviction == EvictionIgnore {
		return
	}
	g.previous = o.OnConnect
	o.OnConnect = g.onConnect
}

func (g *guard) onConnect(ctx context.Context, cn *redis.Conn) error {
	if g.previous != nil {
		if err := g.previous(ctx, cn); err != nil {
			return err
		}
	}
	if g.restart == 0 && g.eviction == EvictionIgnore {
		return nil
	}
	// Only the two sections read here: the default INFO is several
	// kilobytes. Servers before Redis 7 take one section at most and
	// answer an error reply; they get the default INFO.
	info, err := cn.Info(ctx, "server", "memory").Result()
	if err != nil && isReply(err) {
		info, err = cn.Info(ctx).Result()
	}
	if err != nil {
		if isReply(err) {
			g.cannotGuard(err.Error())
			return nil // the server answered, but will not say
		}
		return refused(fmt.Errorf("pool: %s: connection check (INFO, for the restart guard): %w", g.name, err))
	}
	f := infoFields(info)
	if err := g.checkRestart(f); err != nil {
		return err
	}
	return g.checkEviction(f)
}

func (g *guard) checkRestart(f map[string]string) error {
	id := f["run_id"]
	g.mu.Lock()
	if id != "" && id != g.runID {
		if g.runID != "" {
			g.log.Warn("quorumlock: Redis server restarted (run_id changed)", "pool", g.name, "run_id", id, "previous_run_id", g.runID, "uptime_s", f["uptime_in_seconds"])
		}
		g.suspect = g.runID != "" || g.strict
		g.runID = id
	}
	suspect := g.suspect || (id == "" && g.strict)
	g.mu.Unlock()
	if g.restart == 0 || !suspect {
		return nil
	}
	s, ok := f["uptime_in_seconds"]
	secs, err := strconv.ParseInt(s, 10, 64)
	if !ok || err != nil || secs < 0 {
		g.cannotGuard("no uptime_in_seconds in INFO")
		return nil
	}
	// Redis truncates the uptime to whole seconds: the true uptime is at
	// least secs, so refusing while secs < guard refuses every server that
	// has really been up less than the guard.
	up := time.Duration(secs) * time.Second
	if up >= g.restart {
		return nil
	}
	return refused(&RestartError{Pool: g.name, RunID: f["run_id"], Uptime: up, Guard: g.restart})
}

// RestartError is the error of a connection the restart guard refused
// (errors.Is(err, ErrRestarted) holds for it): the server Pool talks to had
// been up for Uptime only (whole seconds, as INFO reports it), below the
// guard's Guard, so it may have forgotten lock keys that have not expired
// yet. It counts towards a quorum again after Guard − Uptime.
type RestartError struct {
	Pool   string // the Pool's name
	RunID  string // the server's run_id
	Uptime time.Duration
	Guard  time.Duration
}

// Remaining is how long after the refusal the server counts again.
func (e *RestartError) Remaining() time.Duration { return e.Guard - e.Uptime }

func (e *RestartError) Error() string {
	return fmt.Sprintf("pool: %s: %v: up for %v only (run_id %s), below the restart guard of %v; it may have lost lock keys that have not expired yet, and counts again in %v (see pool.WithRestartGuard)",
		e.Pool, ErrRestarted, e.Uptime, e.RunID, e.Guard, e.Remaining())
}

// Is reports whether target is ErrRestarted.
func (e *RestartError) Is(target error) bool { return target == ErrRestarted }

func (g *guard) checkEviction(f map[string]string) error {
	policy := f["maxmemory_policy"]
	if g.eviction == EvictionIgnore || policy == "" || policy == "noeviction" {
		return nil
	}
	if g.eviction == EvictionRefuse {
		return refused(fmt.Errorf("pool: %s: %w: maxmemory-policy is %s; set it to noeviction (CONFIG SET maxmemory-policy noeviction) or keep locks on a server of their own", g.name, ErrEvictionPolicy, policy))
	}
	g.mu.Lock()
	first := !g.warned[policy]
	g.warned[policy] = true
	g.mu.Unlock()
	if first {
		g.log.Warn("quorumlock: Redis server may evict lock keys before they expire; set maxmemory-policy noeviction", "pool", g.name, "maxmemory_policy", policy, "maxmemory", f["maxmemory"])
	}
	return nil
}

func (g *guard) cannotGuard(why string) {
	g.mu.Lock()
	first := !g.unknown
	g.unknown = true
	g.mu.Unlock()
	if first {
		g.log.Debug("quorumlock: cannot check the Redis server's uptime or eviction policy; the restart guard does not protect this node", "pool", g.name, "reason", why)
	}
}

// isReply reports an error reply of a server that answered but will not
// answer INFO (not one of the transient replies of a server getting ready).
func isReply(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr) && !errors.Is(err, redis.Nil) && !transient(err)
}

// refusal is the error of a refused connection. go-redis v9.23 unwraps an
// OnConnect error once before returning it to the caller; refusal carries
// the full message both before and after that unwrapping.
type refusal struct{ err error }

func refused(err error) error   { return refusal{err} }
func (r refusal) Error() string { return r.err.Error() }
func (r refusal) Unwrap() error { return r.err }

// infoFields parses the "field:value" lines of an INFO reply.
func infoFields(info string) map[string]string {
	f := make(map[string]string, 64)
	for line := range strings.Lines(info) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && !strings.HasPrefix(k, "#") {
			f[k] = v
		}
	}
	return f
}
