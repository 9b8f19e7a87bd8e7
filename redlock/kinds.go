package redlock

import (
	"slices"

	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/internal/session"
)

// The kinds of lock. A lock's kind is decided once, by the attempt that
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
	// key lives keyTTL, refreshed by the renewal service.
	session bool
}

var (
	kindPlain   = &kind{name: "plain", acquire: opAcquire, extend: opExtend, release: opRelease, held: opHeld, batch: true, line: true}
	kindFenced  = &kind{name: "fenced", acquire: opFenced, extend: opExtend, release: opRelease, held: opHeld, batch: true, line: true}
	kindSession = &kind{name: "session", acquire: opSession, release: opRelease, held: opPeek, batch: true, line: true, session: true}
	kindShared  = &kind{name: "shared", acquire: opAcquireShared, extend: opExtendShared, release: opReleaseShared, held: opHeldShared}
	kindSeveral = &kind{name: "several keys", acquire: opAcquireAll, extend: opExtendAll, release: opReleaseAll, held: opHeldAll, allKeys: true}
	kindPermit  = &kind{name: "permit", acquire: opAcquirePermit, extend: opExtendPermit, release: opRelease, held: opHeld}

	// kinds lists every kind, for lookups by command.
	kinds = [...]*kind{kindPlain, kindFenced, kindSession, kindShared, kindSeveral, kindPermit}
)

// The arguments each kind's commands need beyond the key, token and TTL.
// (Methods with a switch, not function values in the table: o stays on
// the caller's stack.)

// acquireArgs adds to o, an acquire for t (with session s), what k's
// command needs.
func (k *kind) acquireArgs(cfg *config, t *target, s *session.Session, o *node.Op) {
	switch k {
	case kindSession:
		o.Session, o.Seq, o.KeyTTL, o.PrefixLen = s.Key(), s.Seq(), keyTTL(cfg), len(cfg.prefix)
	case kindSeveral:
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
	case kindSeveral:
		id.keys, id.keyArgs = a.keys, op.Keys
	case kindPermit:
		id.permit = &permitOf{count: op.Keys[0].(string), permits: op.Permits, slot: op.Slot}
	}
}

// extendArgs adds to o, an extend of l, what k's command needs.
func (k *kind) extendArgs(l *Lock, o *node.Op) {
	switch k {
	case kindSeveral: // every key, each with the token
		o.Keys, o.Tokens = l.id.keyArgs, slices.Repeat([]any{l.id.tokenArg}, len(l.id.keyArgs))
	case kindPermit: // and the semaphore's count key
		o.FenceKey, o.Permits = l.id.permit.count, l.id.permit.permits
	}
}

// heldArgs adds to o, a Held of l, what k's command needs.
func (k *kind) heldArgs(l *Lock, o *node.Op) {
	switch k {
	case kindSeveral:
		o.Keys = l.id.keyArgs
		o.Token, o.TokenArg = l.id.token, l.id.tokenArg
	case kindShared:
		o.Token, o.TokenArg = l.id.token, l.id.tokenArg
	}
}

// kindOf is the kind an attempt for t under cfg acquires (with session s,
// when not nil). Fencing applies to a lock of several keys too: its one
// command then also raises the counter.
func kindOf(cfg *config, t *target, s *session.Session) *kind {
	switch {
	case t.permit != nil:
		return kindPermit
	case t.keys != nil:
		return kindSeveral
	case cfg.shared:
		return kindShared
	case cfg.fencing:
		return kindFenced
	case s != nil:
		return kindSession
	}
	return kindPlain
}

// sessionKind reports whether the locks cfg asks for are of the kind a
// renewal session may renew (plain ones), given a session.
func sessionKind(cfg *config) bool {
	return !cfg.fencing && !cfg.shared && !cfg.several && !cfg.permit
}

// kindAcquiredBy is the kind of lock the acquire command op may have taken.
// A resumed lock is a plain one: Resume sets no key.
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
