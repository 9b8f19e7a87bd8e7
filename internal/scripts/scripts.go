// Package scripts holds the Lua scripts that read and change lock keys on a
// Redis node, embedded with go:embed. Package node sends them with EVALSHA
// and again with EVAL when the server answers NOSCRIPT (docs/design.md,
// "Fan-out"). Each .lua file documents its keys, arguments and reply; the
// comments here summarise them. The scripts are safe for concurrent use.
package scripts

import (
	_ "embed"
	"strings"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed release.lua
	releaseSrc string
	//go:embed acquire.lua
	acquireSrc string
	//go:embed acquire_fenced.lua
	acquireFencedSrc string
	//go:embed raise_fence.lua
	raiseFenceSrc string
	//go:embed extend_many.lua
	extendManySrc string
	//go:embed peek.lua
	peekSrc string
	//go:embed acquire_session.lua
	acquireSessionSrc string
	//go:embed renew_session.lua
	renewSessionSrc string
	//go:embed leave.lua
	leaveSrc string
	//go:embed resume.lua
	resumeSrc string
	//go:embed inspect.lua
	inspectSrc string
	//go:embed acquire_all.lua
	acquireAllSrc string
	//go:embed release_all.lua
	releaseAllSrc string
	//go:embed held_all.lua
	heldAllSrc string
	//go:embed acquire_shared.lua
	acquireSharedSrc string
	//go:embed extend_shared.lua
	extendSharedSrc string
	//go:embed release_shared.lua
	releaseSharedSrc string
	//go:embed held_shared.lua
	heldSharedSrc string
	//go:embed acquire_permit.lua
	acquirePermitSrc string
	//go:embed extend_permit.lua
	extendPermitSrc string
	//go:embed lib.lua
	lib string // the functions every script that reads a lock key uses
)

var (
	// Release deletes KEYS[1] if it holds ARGV[1], hands it to the first
	// waiter of its line for ARGV[2] ms if that is given and positive, and
	// publishes the release (best effort: a refused PUBLISH is ignored);
	// it returns 1 if the key held our lock (now deleted), else 0, then
	// 0x1f and the waiter when it handed the key to one.
	Release = script(lib, releaseSrc)
	// Extend makes KEYS[1] live at least ARGV[2] ms more if it holds
	// ARGV[1]; it returns 1 if it does, else 0. It never creates the key
	// and never shortens its TTL.
	Extend = script(lib, extendSrc)
	// Acquire sets KEYS[1] to ARGV[1] NX PX ARGV[2]; it returns 1 when the
	// key holds ARGV[1] (also when a copy of the call set it), 0 or minus
	// the length of the line of waiters when taken. With a waiter in
	// ARGV[3..6] (lib.lua, line), a key handed to it is free, and a waiter
	// told "taken" joins the key's line.
	Acquire = script(lib, acquireSrc)
	// AcquireFenced sets KEYS[1] to ARGV[1] NX PX ARGV[2] and, if it did,
	// increments KEYS[2]; it returns the new counter, or 0 when taken.
	AcquireFenced = script(lib, acquireFencedSrc)
	// RaiseFence sets KEYS[2] to ARGV[2] if lower, while KEYS[1] (and
	// KEYS[3..], a multi-key lock's other keys) hold ARGV[1]; it returns 1
	// if they do, else 0.
	RaiseFence = script(lib, raiseFenceSrc)
	// ExtendMany is Extend for KEYS[i] and ARGV[i+1], with the TTL in
	// ARGV[1]; it returns one character per key, '1' if it held its token.
	ExtendMany = script(lib, extendManySrc)
	// Peek returns the token that holds KEYS[1], "" when it is free (a
	// session lock whose session ended is free), any other value as is.
	Peek = script(lib, peekSrc)
	// AcquireSession sets KEYS[1], if free, to ARGV[1] in the session
	// KEYS[2] (created with an incarnation from KEYS[3] when absent,
	// lengthened to ARGV[2] ms otherwise), with a TTL of ARGV[3] ms; it
	// returns the session's incarnation, or 0 when taken.
	AcquireSession = script(lib, acquireSessionSrc)
	// RenewSession lengthens the session key KEYS[1] to ARGV[2] ms while it
	// holds incarnation ARGV[1]; it returns 1 if it did, else 0.
	RenewSession = script(renewSessionSrc)
	// Leave takes waiter ARGV[1] out of the line of KEYS[1] and, if the key
	// was handed to it, hands it on (for ARGV[2] ms) and publishes like
	// Release; it returns 1 if the key had been handed to the waiter.
	Leave = script(lib, leaveSrc)
	// Resume makes KEYS[1] live at least ARGV[2] ms more if it holds
	// exactly ARGV[1] (a plain lock); it returns 1 if it does, -1 if it
	// holds a session lock of ARGV[1] (left untouched), else 0. It never
	// creates the key and never shortens its TTL.
	Resume = script(lib, resumeSrc)
	// Inspect reads KEYS[1] (a lock key), its fencing counter KEYS[2] and
	// its old counter KEYS[3]; it returns the TTL, the two counters and the
	// holder's token, joined by 0x1f (inspect.lua).
	Inspect = script(lib, inspectSrc)
	// AcquireAll sets each of KEYS[1..ARGV[3]] to ARGV[1] PX ARGV[2] if
	// every one is free, in one step (a multi-key lock); fenced (more keys:
	// the counter, then the keys' old counters), it increments the counter.
	// It returns 0 when some key is taken, else 1 or the counter.
	AcquireAll = script(lib, acquireAllSrc)
	// ReleaseAll deletes each of KEYS that holds ARGV[1], handing it to its
	// line's first waiter for ARGV[2] ms if given, and publishes each
	// release like Release; it returns 1 if every key held ARGV[1], else 0.
	ReleaseAll = script(lib, releaseAllSrc)
	// HeldAll returns 1 if every one of KEYS holds ARGV[1], else 0; it
	// writes nothing.
	HeldAll = script(heldAllSrc)
	// AcquireShared adds ARGV[1] to the shared holders of KEYS[1] for
	// ARGV[2] ms if the key is free or shared and no waiter of Lock is in
	// its line; it returns 1 if ARGV[1] is a shared holder, else 0.
	AcquireShared = script(lib, acquireSharedSrc)
	// ExtendShared makes shared holder ARGV[1] of KEYS[1] live at least
	// ARGV[2] ms more; it returns 1 if it is a live holder, else 0. It
	// never creates a holder and never shortens one.
	ExtendShared = script(lib, extendSharedSrc)
	// ReleaseShared takes ARGV[1] out of the shared holders of KEYS[1],
	// deleting the key (handing it on for ARGV[2] ms if given, and
	// publishing) when none is left; it returns 1 if ARGV[1] was a live
	// holder, else 0.
	ReleaseShared = script(lib, releaseSharedSrc)
	// HeldShared returns 1 if ARGV[1] is a live shared holder of KEYS[1],
	// else 0; it writes nothing.
	HeldShared = script(lib, heldSharedSrc)
	// AcquirePermit takes permit ARGV[4] (of ARGV[3], keys KEYS[2..]) of a
	// semaphore whose count key is KEYS[1], like Acquire, unless the count
	// key declares another count; it returns "!" and that count, or "1"
	// (held by ARGV[1]) or "0" (taken) followed by one '1' per free permit
	// and '0' per held one.
	AcquirePermit = script(lib, acquirePermitSrc)
	// ExtendPermit is Extend for a permit's key KEYS[1] that also makes
	// the count key KEYS[2] live as long (declaring ARGV[3] if absent).
	ExtendPermit = script(lib, extendPermitSrc)
)

// The bounds lib.lua keeps on the nodes, whatever a key's history
// (docs/design.md, "Bounds"): a key's line of waiters, and the set of those
// that left it for good, hold at most LineMax entries each; a key's shared
// holders at most SharedMax; one script call drops at most Prune lapsed
// entries of each set it touches. TestBoundsMatchLib checks that lib.lua
// says the same.
const (
	LineMax   = 1000
	SharedMax = 10000
	Prune     = 8
)

// script joins parts into one script without its comment lines and blank
// lines: the servers get (and, on EVAL, parse) a third of the text, and
// servers that compile a script on every call, like the in-memory ones of
// tests and the demo, run it that much faster.
func script(parts ...string) *redis.Script {
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(strip(p))
	}
	return redis.NewScript(b.String())
}

// strip drops p's comment lines and blank lines, and the code of the
// defects the build does not restore (restore).
func strip(p string) string {
	var b strings.Builder
	for line := range strings.Lines(restore(p)) {
		if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "--") {
			b.WriteString(line)
		}
	}
	return b.String()
}

// Lib is the text every script that reads a lock key begins with: the
// functions of lib.lua, as the scripts carry them. The simulator
// (testkit/internal/sim) defines them once per Lua state instead of once per
// call.
func Lib() string { return strip(lib) }
