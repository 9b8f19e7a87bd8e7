package redlock

import (
	"context"
	"slices"

	"github.com/quorumlock/quorumlock/internal/conf"
	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/internal/session"
	"github.com/quorumlock/quorumlock/internal/wake"
)

// The kinds of lock, and the targets they are acquired for (one key,
// several, a permit). A lock's kind is decided once, by the attempt that
// acquires it (kindOf), and says which command each of its operations runs
// and what it can do; the rest of the package asks the kind rather than
// the fields in which kinds differ (docs/design.md, "Kinds of lock").

// kind is one kind of lock.
type kind struct {
	name    string
	acquire *opSpec
	extend  *opSpec // nil: renewed through its session (Lock.extendSession)
	release *opSpec
	held    *opSpec
	// allKeys: its commands name every key of the lock (node.Op.Keys).
	allKeys bool
	// batch: its extends may share one command with other locks' (the
	// renewal service's ExtendMany); the others renew one by one.
	batch bool
	// line: its Lock calls keep a place in the key's line of waiters, where
	// the nodes keep lines (Client.handoff).
	line bool
	// session: it is renewed through its renewal session (session.go); its
	// key lives Config.KeyTTL, refreshed by the renewal service.
	session bool
	// fenced: its acquire raises the fencing counter; a won round writes
	// the highest back (acquisition.writeBack) and the Lock has a Fence.
	fenced bool
	// shared: its holders share the key (Shared).
	shared bool
	// permit: a semaphore's permit; its acquire's refusals report the count
	// a node declared (permitTry.saw), not the length of a line.
	permit bool
}

var (
	kindPlain   = &kind{name: "plain", acquire: opAcquire, extend: opExtend, release: opRelease, held: opHeld, batch: true, line: true}
	kindFenced  = &kind{name: "fenced", acquire: opFenced, extend: opExtend, release: opRelease, held: opHeld, batch: true, line: true, fenced: true}
	kindSession = &kind{name: "session", acquire: opSession, release: opRelease, held: opPeek, batch: true, line: true, session: true}
	kindShared  = &kind{name: "shared", acquire: opAcquireShared, extend: opExtendShared, release: opReleaseShared, held: opHeldShared, shared: true}
	kindSeveral = &kind{name: "several keys", acquire: opAcquireAll, extend: opExtendAll, release: opReleaseAll, held: opHeldAll, allKeys: true}
	// kindSeveralFenced runs kindSeveral's commands; its acquire also
	// raises the counter (node.Op.FenceKey).
	kindSeveralFenced = &kind{name: "several keys, fenced", acquire: opAcquireAll, extend: opExtendAll, release: opReleaseAll, held: opHeldAll, allKeys: true, fenced: true}
	kindPermit        = &kind{name: "permit", acquire: opAcquirePermit, extend: opExtendPermit, release: opRelease, held: opHeld, permit: true}

	// kinds lists every kind, for lookups by command (a kind that shares
	// another's commands comes after it).
	kinds = [...]*kind{kindPlain, kindFenced, kindSession, kindShared, kindSeveral, kindSeveralFenced, kindPermit}
)

// The arguments each kind's commands need beyond the key, token and TTL.
// (Methods with a switch, not function values in the table: o stays on
// the caller's stack.)

// acquireArgs adds to o, an acquire for t (with session s), what k's
// command needs.
func (k *kind) acquireArgs(cfg *conf.Config, t *target, s *session.Session, o *node.Op) {
	switch k {
	case kindSession:
		o.Session, o.Seq, o.KeyTTL, o.PrefixLen = s.Key(), s.Seq(), cfg.KeyTTL(), len(cfg.Prefix)
	case kindSeveral, kindSeveralFenced:
		o.Keys = t.rkeys
	case kindPermit: // the count key and every permit's, and which is tried
		p := t.permit
		o.Keys, o.Permits, o.Slot = p.sem.keys, p.sem.permits, p.slot
	}
}

// identify adds to id, a lock's acquired by a with the command op, what
// of k it names: the keys of a lock of several, the permit of a permit.
func (k *kind) identify(id *lockID, a *acquisition, op *node.Op) {
	switch k {
	case kindSeveral, kindSeveralFenced:
		id.keys, id.keyArgs = a.keys, op.Keys
	case kindPermit:
		id.permit = &permitOf{count: op.Keys[0].(string), permits: op.Permits, slot: op.Slot}
	}
}

// extendArgs adds to o, an extend of l, what k's command needs.
func (k *kind) extendArgs(l *Lock, o *node.Op) {
	switch k {
	case kindSeveral, kindSeveralFenced: // every key, each with the token
		o.Keys, o.Tokens = l.id.keyArgs, slices.Repeat([]any{l.id.tokenArg}, len(l.id.keyArgs))
	case kindPermit: // and the semaphore's count key
		o.FenceKey, o.Permits = l.id.permit.count, l.id.permit.permits
	}
}

// heldArgs adds to o, a Held of l, what k's command needs.
func (k *kind) heldArgs(l *Lock, o *node.Op) {
	switch k {
	case kindSeveral, kindSeveralFenced:
		o.Keys = l.id.keyArgs
		o.Token, o.TokenArg = l.id.token, l.id.tokenArg
	case kindShared:
		o.Token, o.TokenArg = l.id.token, l.id.tokenArg
	}
}

// observed is cfg, or, for an attempt a at a permit that met another
// permit count, a copy without the Observer: the permit is given back at
// once and the call fails, so the Observer hears of the call only as its
// AcquireFailed.
func (k *kind) observed(cfg *conf.Config, a *acquisition) *conf.Config {
	if cfg.Observer == nil || !k.permit || a.permit.declared < 0 {
		return cfg
	}
	quiet := *cfg
	quiet.Observer = nil
	return &quiet
}

// kindOf is the kind an attempt for t under cfg acquires (with session s,
// when not nil). Fencing applies to a lock of several keys too: its one
// command then also raises the counter.
func kindOf(cfg *conf.Config, t *target, s *session.Session) *kind {
	switch {
	case t.permit != nil:
		return kindPermit
	case t.keys != nil && cfg.Fencing:
		return kindSeveralFenced
	case t.keys != nil:
		return kindSeveral
	case cfg.Shared:
		return kindShared
	case cfg.Fencing:
		return kindFenced
	case s != nil:
		return kindSession
	}
	return kindPlain
}

// shape is what an acquisition names: one key, several keys as one lock, or
// a semaphore's permits.
type shape int

const (
	shapeOne shape = iota
	shapeSeveral
	shapePermit
)

// refused says why cfg's options cannot make a lock of shape sh ("": they
// can), on a Client whose nodes keep lines if handoff. (A semaphore's
// Pools, and several keys', are checked where they are made.)
func refused(cfg *conf.Config, sh shape, handoff bool) string {
	switch {
	case cfg.Fencing && sh == shapePermit:
		return "WithFencing: a fence orders one holder after another, and a semaphore's permits are held at once"
	case cfg.Shared && sh == shapePermit:
		return "Shared: permits are not shared (a semaphore of n permits already admits n holders)"
	case cfg.Shared && sh == shapeSeveral:
		return "a lock of several keys cannot be shared (Shared): take each key's shared lock"
	case cfg.Shared && cfg.Fencing:
		return "Shared and WithFencing: fences order the writers of a resource, and shared holders get none"
	case cfg.Shared && !handoff:
		return "Shared needs every Pool to be of package pool and none a Cluster client: the masters keep the line of waiters that holds new shared holders back"
	}
	return ""
}

// sessionKind reports whether the locks cfg asks for are of the kind a
// renewal session may renew (plain ones), given a session.
func sessionKind(cfg *conf.Config) bool {
	return !cfg.Fencing && !cfg.Shared && !cfg.Several && !cfg.Permit
}

// kindAcquiredBy is the kind of lock the acquire command op may have taken,
// as far as its release goes (release, allKeys, session): a lock of several
// keys reads as kindSeveral, fenced or not, since both run one acquire
// command, so do not ask it whether the lock is fenced. A resumed lock is a
// plain one: Resume sets no key.
func kindAcquiredBy(op *node.Op) *kind {
	for _, k := range kinds {
		if k.acquire.kind == op.Kind {
			return k
		}
	}
	return kindPlain
}

// isRelease reports whether spec is a release of some kind.
func isRelease(spec *opSpec) bool {
	return slices.ContainsFunc(kinds[:], func(k *kind) bool { return k.release == spec })
}

// refOf is what the acquire command op may have taken.
func refOf(op *node.Op) ref {
	k := kindAcquiredBy(op)
	r := ref{rkey: op.Key, token: op.Token, spec: k.release, session: k.session}
	if k.allKeys {
		r.keys = op.Keys
	}
	return r
}

// ref is what the lock holds.
func (l *Lock) ref() ref {
	return ref{rkey: l.id.rkey, keys: l.id.keyArgs, token: l.id.token, spec: l.kind.release, session: l.kind.session}
}

// ref is what a release takes back from the nodes: a token on a key, on
// several keys, or a shared holder's place.
type ref struct {
	rkey    string
	keys    []any // a lock of several keys: all of them (rkey is the first); else nil
	token   string
	spec    *opSpec // the release
	session bool    // a session lock's: its key lives Config.KeyTTL
}

// target names what an acquisition takes: one key, several keys as one
// lock (TryLockAll), or a semaphore's permit.
type target struct {
	key    string   // the caller's key; several: the keys joined by ", " (errors, logs)
	rkey   string   // the Redis key; several: the first
	keys   []string // several: the caller's keys, in the caller's order (nil: one)
	rkeys  []any    // several: the Redis keys, as command arguments, in that order
	sorted []string // several: the Redis keys, sorted (this Client's turns are taken in this order); one: nil
	// sweep, when not nil, is an attempt for t other than one round: a
	// semaphore's, which tries its permits (keys) until it takes one.
	sweep  func(ctx context.Context, cfg *conf.Config, cl *call) (*Lock, error)
	permit *permitTry // one permit of a semaphore (rkey): the attempt at it
}

// one is the target of a lock of key.
func (c *Client) one(cfg *conf.Config, key string) *target {
	return single(key, c.redisKey(cfg, key))
}

// single is the target of a lock of the one Redis key rkey, named key.
// (Its sorted stays nil: a slice of one, or of an array in the target,
// would cost the hot path an allocation.)
func single(key, rkey string) *target {
	return &target{key: key, rkey: rkey}
}

// first is the Redis key a waiter's line and notices are keyed by: the
// key, or the first of several in sorted order.
func (t *target) first() string {
	if t.sorted == nil {
		return t.rkey
	}
	return t.sorted[0]
}

// each calls f with each Redis key of t, in sorted order.
func (t *target) each(f func(rkey string)) {
	if t.sorted == nil {
		f(t.rkey)
		return
	}
	for _, k := range t.sorted {
		f(k)
	}
}

// enter takes this Client's turn on every key of t (gates), in sorted
// order, so that two attempts never wait for each other's turns. It
// returns ctx's error, holding no turn, when ctx ends first.
func (t *target) enter(ctx context.Context, g *wake.Gates) error {
	if t.sorted == nil {
		return g.Enter(ctx, t.rkey)
	}
	for i, k := range t.sorted {
		if err := g.Enter(ctx, k); err != nil {
			for _, k := range t.sorted[:i] {
				g.Exit(k)
			}
			return err
		}
	}
	return nil
}

// exit ends the turns of a successful enter.
func (t *target) exit(g *wake.Gates) { t.each(g.Exit) }
