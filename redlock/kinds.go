package redlock

import (
	"slices"

	"github.com/quorumlock/quorumlock/internal/node"
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
	// acquireOp, extendOp and heldOp add to o, the command of an acquire
	// for t (with session s), an extend or a Held of l, what this kind's
	// command needs beyond the key, token and TTL.
	acquireOp func(cfg *config, t *target, s *session, o *node.Op)
	extendOp  func(l *Lock, o *node.Op)
	heldOp    func(l *Lock, o *node.Op)
}

var (
	kindPlain   = &kind{name: "plain", acquire: opAcquire, extend: opExtend, release: opRelease, held: opHeld, batch: true, line: true}
	kindFenced  = &kind{name: "fenced", acquire: opFenced, extend: opExtend, release: opRelease, held: opHeld, batch: true, line: true}
	kindSession = &kind{name: "session", acquire: opSession, release: opRelease, held: opPeek, batch: true, line: true,
		acquireOp: func(cfg *config, _ *target, s *session, o *node.Op) {
			o.Session, o.Seq, o.KeyTTL, o.PrefixLen = s.skey, s.seq, keyTTL(cfg), len(cfg.prefix)
		}}
	kindShared = &kind{name: "shared", acquire: opAcquireShared, extend: opExtendShared, release: opReleaseShared, held: opHeldShared,
		heldOp: withToken}
	kindSeveral = &kind{name: "several keys", acquire: opAcquireAll, extend: opExtendAll, release: opReleaseAll, held: opHeldAll, allKeys: true,
		acquireOp: func(_ *config, t *target, _ *session, o *node.Op) { o.Keys = t.rkeys },
		extendOp:  everyKeyToken, heldOp: func(l *Lock, o *node.Op) { o.Keys = l.id.keyArgs; withToken(l, o) }}
	kindPermit = &kind{name: "permit", acquire: opAcquirePermit, extend: opExtendPermit, release: opRelease, held: opHeld,
		acquireOp: func(_ *config, t *target, _ *session, o *node.Op) { t.permit.fill(o) },
		extendOp:  func(l *Lock, o *node.Op) { o.FenceKey, o.Permits = l.id.permit.count, l.id.permit.permits }}

	// kinds lists every kind, for lookups by command.
	kinds = [...]*kind{kindPlain, kindFenced, kindSession, kindShared, kindSeveral, kindPermit}
)

// kindOf is the kind an attempt for t under cfg acquires (with session s,
// when not nil). Fencing applies to a lock of several keys too: its one
// command then also raises the counter.
func kindOf(cfg *config, t *target, s *session) *kind {
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

// withToken: the command checks the lock's token.
func withToken(l *Lock, o *node.Op) { o.Token, o.TokenArg = l.id.token, l.id.tokenArg }

// everyKeyToken: the command covers every key, each with the token.
func everyKeyToken(l *Lock, o *node.Op) {
	o.Keys, o.Tokens = l.id.keyArgs, slices.Repeat([]any{l.id.tokenArg}, len(l.id.keyArgs))
}
