package history

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/internal/scripts"
)

// ScriptKind identifies one of quorumlock's Lua scripts in a MONITOR stream.
type ScriptKind uint8

// The lock scripts, as the Audit tells them apart.
const (
	// ScriptOther is any script that is not one of quorumlock's.
	ScriptOther ScriptKind = iota
	// ScriptAcquire is the fenced acquire: SET NX PX, then INCR if it set.
	ScriptAcquire
	// ScriptRaise is the fencing write-back: GET, then raise the counter
	// if the key holds the token.
	ScriptRaise
	// ScriptExtend is the token-checked PEXPIRE.
	ScriptExtend
	// ScriptRelease is the token-checked DEL.
	ScriptRelease
	// ScriptAcquirePlain is the unfenced acquire script: SET if free.
	ScriptAcquirePlain
	// ScriptExtendMany is the token-checked PEXPIRE of many keys, each with
	// its own token.
	ScriptExtendMany
	// ScriptAcquireSession is the session acquire: SET the lock key if
	// free, create the session key with an incarnation from the sequence
	// (INCR) or lengthen it.
	ScriptAcquireSession
	// ScriptRenewSession lengthens a session key while it holds the
	// incarnation it names.
	ScriptRenewSession
	// ScriptPeek reads who holds a lock; it writes nothing.
	ScriptPeek
	// ScriptLeave takes a waiter out of a key's line and, only if the key
	// was handed to that waiter, deletes it and hands it on.
	ScriptLeave
	// ScriptResume is Client.Resume's token-checked PEXPIRE.
	ScriptResume
	// ScriptInspect reads a lock key, its TTL and its fencing counters; it
	// writes nothing.
	ScriptInspect
	// ScriptAcquireAll is the acquire of a lock of several keys: SET every
	// key to the token if all are free (and, fenced, INCR the counter).
	ScriptAcquireAll
	// ScriptReleaseAll is the release of a lock of several keys: DEL each
	// key that holds the token (then maybe SET it, handed to a waiter).
	ScriptReleaseAll
	// ScriptHeldAll reads whether every key of a lock of several keys
	// holds its token; it writes nothing.
	ScriptHeldAll
	// ScriptAcquireShared joins a key's shared holders: SET the key to
	// the shared mark and the token if free, then ZADD the holder and
	// lengthen the key (PEXPIRE) while it is shared.
	ScriptAcquireShared
	// ScriptExtendShared lengthens a shared holder's place and its key
	// (PEXPIRE) only while the key is shared.
	ScriptExtendShared
	// ScriptReleaseShared takes a shared holder out: PEXPIRE the key to
	// its last remaining holder, or DEL it (then maybe SET it, handed to a
	// waiter), only while the key is shared.
	ScriptReleaseShared
	// ScriptHeldShared reads whether a token is a live shared holder; it
	// writes nothing.
	ScriptHeldShared
	// ScriptAcquirePermit takes a semaphore's permit: SET the permit's key
	// (KEYS[1+ARGV[4]]) to the token if free, and declare the count on the
	// count key (KEYS[1]): SET it to ARGV[3], or lengthen it (PEXPIRE).
	ScriptAcquirePermit
	// ScriptExtendPermit lengthens a permit's key (KEYS[1], PEXPIRE) and
	// its semaphore's count key (KEYS[2]: PEXPIRE, or SET to ARGV[3]) only
	// while the permit's key holds the token.
	ScriptExtendPermit
)

// LibraryScripts maps the SHA1 (lower-case hex, as EVALSHA sends it) of each
// of quorumlock's lock scripts to its kind.
func LibraryScripts() map[string]ScriptKind {
	return map[string]ScriptKind{
		scripts.AcquireFenced.Hash():  ScriptAcquire,
		scripts.RaiseFence.Hash():     ScriptRaise,
		scripts.Extend.Hash():         ScriptExtend,
		scripts.Release.Hash():        ScriptRelease,
		scripts.Acquire.Hash():        ScriptAcquirePlain,
		scripts.ExtendMany.Hash():     ScriptExtendMany,
		scripts.AcquireSession.Hash(): ScriptAcquireSession,
		scripts.RenewSession.Hash():   ScriptRenewSession,
		scripts.Peek.Hash():           ScriptPeek,
		scripts.Leave.Hash():          ScriptLeave,
		scripts.Resume.Hash():         ScriptResume,
		scripts.Inspect.Hash():        ScriptInspect,
		scripts.AcquireAll.Hash():     ScriptAcquireAll,
		scripts.ReleaseAll.Hash():     ScriptReleaseAll,
		scripts.HeldAll.Hash():        ScriptHeldAll,
		scripts.AcquireShared.Hash():  ScriptAcquireShared,
		scripts.ExtendShared.Hash():   ScriptExtendShared,
		scripts.ReleaseShared.Hash():  ScriptReleaseShared,
		scripts.HeldShared.Hash():     ScriptHeldShared,
		scripts.AcquirePermit.Hash():  ScriptAcquirePermit,
		scripts.ExtendPermit.Hash():   ScriptExtendPermit,
	}
}

// Entry is one command of a node's MONITOR stream.
type Entry struct {
	// Source is "lua" for a command run by a script, else the client's
	// address as the server saw it.
	Source string
	// Args is the command: its name first, as the client sent it.
	Args []string
}

// AuditConfig configures an Audit.
type AuditConfig struct {
	// Prefix starts every lock key (redlock.DefaultKeyPrefix unless the
	// clients set another); keys that end in ":fence" are fencing
	// counters, not lock keys; Prefix + "s:" starts the renewal sessions'
	// keys (Prefix + "s:seq" is their incarnation sequence, a counter).
	Prefix string
	// Scripts maps script SHA1s to their kinds; nil means LibraryScripts().
	Scripts map[string]ScriptKind
	// AllowExternal accepts writes to lock keys from outside the lock
	// scripts (a test that expires keys by hand to emulate a clock jump);
	// otherwise each is an S3 violation.
	AllowExternal bool
}

// AuditStats counts what an Audit saw.
type AuditStats struct {
	Entries int // MONITOR entries observed
	// Checked counts the changes made by a lock script (a delete by
	// release, a PEXPIRE by extend, a counter raise, a session renewal)
	// while the key's content on that node was known from the stream: each
	// was verified to hit a key holding the script's own token (for a
	// renewal: the session key holding the renewal's incarnation).
	Checked int
	// Unchecked counts such changes while the key's content was unknown
	// (after a gap in the stream, before the key was next set).
	Unchecked int
	// Gaps counts (re)attachments to a node's stream: what happened in
	// between is unknown.
	Gaps int
	// External counts writes to lock keys from outside the lock scripts.
	External int
	// Unattributed counts commands run by a script with no script call
	// seen before them.
	Unattributed int
}

// Audit follows the MONITOR streams of every node (fed by Monitor, or by a
// test by hand) and checks S3: a lock script changes a lock key only while
// that key holds the script's token. It tracks, per node and key, the token
// the key holds as far as the stream shows: a fenced acquire that set the
// key (its INCR follows the SET), a delete, or "unknown" after a gap or a
// write it cannot interpret. Expiry is silent in the stream, so a key known
// to hold token T may in truth be absent; a correct script then changes
// nothing, so a change by a script with another token is a violation either
// way. All methods are safe for concurrent use.
type Audit struct {
	cfg AuditConfig

	mu       sync.Mutex
	nodes    map[int]*auditNode
	findings []Violation
	nfound   int
	stats    AuditStats
}

type auditNode struct {
	keys   map[string]keyState
	script *openScript // the script whose commands are arriving, if any
}

// keyState is what the stream says a lock key (or a session key) holds on
// one node.
type keyState struct {
	known bool
	token string // "" when absent; a session lock's token (not its whole value); a session key's incarnation
}

// openScript is a script call whose own commands follow it in the stream
// (Redis feeds the EVAL/EVALSHA line before the commands it runs).
type openScript struct {
	kind    ScriptKind
	key     string // KEYS[1] when it is a lock key (a session key for a renewal), else ""
	token   string // ARGV[1]
	lines   int    // commands seen from it
	checked bool   // the raise has been checked
	keys    []string
	argv    []string
}

// maxFindings bounds the violations an Audit keeps (all are counted).
const maxFindings = 100

// NewAudit returns an Audit with nothing observed yet.
func NewAudit(cfg AuditConfig) *Audit {
	if cfg.Scripts == nil {
		cfg.Scripts = LibraryScripts()
	}
	return &Audit{cfg: cfg, nodes: map[int]*auditNode{}}
}

// Stats returns the counts so far.
func (a *Audit) Stats() AuditStats {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stats
}

// Findings returns the S3 violations found so far (at most 100 are kept)
// and how many there were in all.
func (a *Audit) Findings() ([]Violation, int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]Violation(nil), a.findings...), a.nfound
}

func (a *Audit) node(n int) *auditNode {
	nd := a.nodes[n]
	if nd == nil {
		nd = &auditNode{keys: map[string]keyState{}}
		a.nodes[n] = nd
	}
	return nd
}

// Gap tells the Audit that entries of node n may have been missed (the
// stream was attached for the first time, or again after a disconnection):
// what every key of the node holds is unknown until it is next set.
func (a *Audit) Gap(n int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	nd := a.node(n)
	clear(nd.keys)
	nd.script = nil
	a.stats.Gaps++
}

func (a *Audit) isLockKey(k string) bool {
	return strings.HasPrefix(k, a.cfg.Prefix) && !strings.HasSuffix(k, ":fence") && !strings.HasPrefix(k[len(a.cfg.Prefix):], "s:") &&
		!strings.HasSuffix(k, lineSuffix) && !strings.HasSuffix(k, lapseSuffix) && !strings.HasSuffix(k, holdersSuffix) && !a.isCountKey(k)
}

// isCountKey reports whether k is a semaphore's count key (prefix{name}
// and countSuffix): it declares the number of permits, and holds no token.
func (a *Audit) isCountKey(k string) bool {
	return strings.HasPrefix(k, a.cfg.Prefix) && strings.HasSuffix(k, "}"+countSuffix)
}

// The suffixes of a lock key's line of waiters (internal/scripts/lib.lua)
// and of its shared holders' set (acquire_shared.lua): beside the key,
// not lock keys. Only the lock key says whether the key is shared.
const (
	lineSuffix    = node.LineSuffix
	lapseSuffix   = node.LapseSuffix
	holdersSuffix = node.HoldersSuffix
	countSuffix   = node.CountSuffix // a semaphore's count key (redlock.Semaphore)
)

// isSessionKey reports whether k is a renewal session's key (not the
// sequence): a write to it changes whether that session's locks are held.
func (a *Audit) isSessionKey(k string) bool {
	return strings.HasPrefix(k, a.cfg.Prefix+"s:") && k != a.cfg.Prefix+"s:seq"
}

// isGuarded: a write to k from outside the lock scripts changes who holds
// a lock (or, for a semaphore's count key, how many may).
func (a *Audit) isGuarded(k string) bool {
	return a.isLockKey(k) || a.isSessionKey(k) || a.isCountKey(k)
}

func (a *Audit) report(n int, key, format string, args ...any) {
	a.nfound++
	if len(a.findings) < maxFindings {
		a.findings = append(a.findings, Violation{Property: S3, Key: key, Msg: fmt.Sprintf("node%d: ", n) + fmt.Sprintf(format, args...)})
	}
}

// Observe feeds the next entry of node n's stream. Entries of one node must
// come in stream order; nodes are independent.
func (a *Audit) Observe(n int, e Entry) {
	if len(e.Args) == 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.stats.Entries++
	nd := a.node(n)
	cmd := strings.ToLower(e.Args[0])
	if e.Source != "lua" {
		nd.script = nil // a client command: any script before it has ended
		switch cmd {
		case "eval", "evalsha", "eval_ro", "evalsha_ro":
			nd.script = a.openScript(cmd, e.Args)
		default:
			a.clientWrite(n, nd, cmd, e)
		}
		return
	}
	s := nd.script
	if s == nil {
		a.stats.Unattributed++
		a.scriptWrite(n, nd, cmd, e, "a script that was not seen starting")
		return
	}
	s.lines++
	a.scriptLine(n, nd, s, cmd, e)
}

// scriptLine checks one command a library script ran (a line of s), as
// that script's source allows it.
func (a *Audit) scriptLine(n int, nd *auditNode, s *openScript, cmd string, e Entry) {
	switch s.kind {
	case ScriptAcquire:
		// SET key token NX PX ttl; then INCR counter only if it set.
		if cmd == "incr" && s.key != "" {
			nd.keys[s.key] = keyState{known: true, token: s.token}
		}
	case ScriptRelease, ScriptLeave:
		// DEL key only while it holds the token (Leave: is handed to the
		// waiter); then maybe SET it, handed to the next waiter.
		switch {
		case s.key == "" || len(e.Args) < 2 || e.Args[1] != s.key:
		case cmd == "del":
			a.check(n, nd, s, "release deleted")
			nd.keys[s.key] = keyState{known: true}
		case cmd == "set" && len(e.Args) > 2:
			nd.keys[s.key] = keyState{known: true, token: e.Args[2]}
		}
	case ScriptExtend, ScriptResume:
		if cmd == "pexpire" && s.key != "" && len(e.Args) > 1 && e.Args[1] == s.key {
			a.check(n, nd, s, "extend set the TTL of")
		}
	case ScriptRaise:
		// GET key (and, for a lock of several keys, its other keys,
		// KEYS[3..]); only if every one holds the token: GET counter
		// (KEYS[2]), maybe SET it.
		if cmd == "get" && !s.checked && len(s.keys) > 1 && len(e.Args) > 1 && e.Args[1] == s.keys[1] {
			s.checked = true
			for i, k := range s.keys {
				if i != 1 && a.isLockKey(k) {
					a.check(n, nd, &openScript{key: k, token: s.token}, "the fencing write-back raised the counter of")
				}
			}
		}
	case ScriptAcquirePlain:
		// GET key (and a session key); SET key token PX ttl if free.
		if cmd == "set" && s.key != "" && len(e.Args) > 1 && e.Args[1] == s.key {
			nd.keys[s.key] = keyState{known: true, token: s.token}
		}
	case ScriptAcquireSession:
		a.acquireSession(nd, s, cmd, e)
	case ScriptRenewSession:
		// GET session key; PEXPIRE it GT only if it holds the incarnation.
		if cmd == "pexpire" && s.key != "" && len(e.Args) > 1 && e.Args[1] == s.key {
			a.check(n, nd, s, "a session renewal lengthened")
		}
	case ScriptExtendMany:
		// per key: GET it; PEXPIRE it GT only if it names its token.
		if cmd == "pexpire" && len(e.Args) > 1 {
			if i := slices.Index(s.keys, e.Args[1]); i >= 0 && i+1 < len(s.argv) && a.isLockKey(e.Args[1]) {
				one := &openScript{kind: ScriptExtendMany, key: e.Args[1], token: s.argv[i+1]}
				a.check(n, nd, one, "a batched extend set the TTL of")
			}
		}
	case ScriptAcquireAll:
		// GET each key; if all are free: (INCR counter,) SET each key
		// that does not hold the token yet.
		if cmd == "set" && len(e.Args) > 1 && s.token != "" && a.isLockKey(e.Args[1]) && slices.Contains(s.keys, e.Args[1]) {
			nd.keys[e.Args[1]] = keyState{known: true, token: s.token}
		}
	case ScriptReleaseAll:
		// per key: GET it; only if it holds the token: DEL it, then maybe
		// SET it, handed to the next waiter, and PUBLISH.
		a.releaseAll(n, nd, s, cmd, e)
	case ScriptAcquireShared, ScriptExtendShared, ScriptReleaseShared:
		a.sharedLine(n, nd, s, cmd, e)
	case ScriptAcquirePermit:
		a.acquirePermit(n, nd, s, cmd, e)
	case ScriptExtendPermit:
		a.extendPermit(n, nd, s, cmd, e)
	case ScriptPeek, ScriptInspect, ScriptHeldAll, ScriptHeldShared:
		a.scriptWrite(n, nd, cmd, e, "a read-only script (peek, inspect, held)")
	default:
		a.scriptWrite(n, nd, cmd, e, "a script that is not one of quorumlock's")
	}
}

// releaseAll follows a release of a lock of several keys: each delete must
// hit a key of the lock that holds its token; a SET hands a key to a
// waiter.
func (a *Audit) releaseAll(n int, nd *auditNode, s *openScript, cmd string, e Entry) {
	if len(e.Args) < 2 || !a.isLockKey(e.Args[1]) || !slices.Contains(s.keys, e.Args[1]) {
		return
	}
	k := e.Args[1]
	switch {
	case cmd == "del":
		a.check(n, nd, &openScript{key: k, token: s.token}, "release deleted")
		nd.keys[k] = keyState{known: true}
	case cmd == "set" && len(e.Args) > 2:
		nd.keys[k] = keyState{known: true, token: e.Args[2]}
	}
}

// acquirePermit follows a permit's acquire (KEYS[1] the count key,
// KEYS[2..] the permits' keys; ARGV[1] token, ARGV[3] the count, ARGV[4]
// the permit, from 1): it may SET its own permit's key to its token, and
// SET the count key to its count or PEXPIRE it; any other write to a
// guarded key is a violation.
func (a *Audit) acquirePermit(n int, nd *auditNode, s *openScript, cmd string, e Entry) {
	pos, ok := writeCommands[cmd]
	if !ok {
		return
	}
	slot := -1
	if len(s.argv) > 3 {
		if i, err := strconv.Atoi(s.argv[3]); err == nil && i >= 1 && i < len(s.keys) {
			slot = i
		}
	}
	for _, k := range writtenKeys(e.Args, pos) {
		switch {
		case len(s.keys) > 0 && k == s.keys[0] && countWrite(s, cmd, e):
		case slot > 0 && k == s.keys[slot] && cmd == "set" && len(e.Args) > 2 && e.Args[2] == s.token:
			nd.keys[k] = keyState{known: true, token: s.token}
		case a.isGuarded(k):
			nd.keys[k] = keyState{}
			a.report(n, k, "a permit acquire (token %q, permit %d) ran %s on %q, which it may not", s.token, slot, strings.ToUpper(cmd), k)
		}
	}
}

// extendPermit follows a permit's extend (KEYS[1] the permit's key,
// KEYS[2] the count key; ARGV[1] token, ARGV[3] the count): its PEXPIRE of
// the permit's key, and its first change of the count key (PEXPIRE, or SET
// to its count), must come while the permit's key holds its token; any
// other write to a guarded key is a violation.
func (a *Audit) extendPermit(n int, nd *auditNode, s *openScript, cmd string, e Entry) {
	pos, ok := writeCommands[cmd]
	if !ok {
		return
	}
	for _, k := range writtenKeys(e.Args, pos) {
		switch {
		case s.key != "" && k == s.key && cmd == "pexpire":
			a.check(n, nd, s, "a permit extend set the TTL of")
			s.checked = true
		case s.key != "" && len(s.keys) > 1 && k == s.keys[1] && countWrite(s, cmd, e):
			if !s.checked {
				a.check(n, nd, s, "a permit extend changed the count key beside")
				s.checked = true
			}
		case a.isGuarded(k):
			nd.keys[k] = keyState{}
			a.report(n, k, "a permit extend (token %q) ran %s on %q, which it may not", s.token, strings.ToUpper(cmd), k)
		}
	}
}

// countWrite reports whether cmd is a write a permit script may make to
// its semaphore's count key: a PEXPIRE, or a SET to its count (ARGV[3]).
func countWrite(s *openScript, cmd string, e Entry) bool {
	return cmd == "pexpire" || cmd == "set" && len(e.Args) > 2 && len(s.argv) > 2 && e.Args[2] == s.argv[2]
}

// sharedLine follows a shared holder's script on its lock key (the
// holders' set is not audited: only the key says whether others are kept
// out). The join may SET the key to the shared mark and its token; every
// PEXPIRE (a join, an extend, a release to the last remaining holder) and
// the DEL of a release must hit a key that holds shared holders: a key held
// alone, or absent, is not theirs to lengthen or delete. A release's SET
// after its DEL hands the key to a waiter.
func (a *Audit) sharedLine(n int, nd *auditNode, s *openScript, cmd string, e Entry) {
	if s.key == "" || len(e.Args) < 2 || e.Args[1] != s.key {
		return
	}
	switch {
	case cmd == "set" && len(e.Args) > 2:
		v := e.Args[2]
		if s.kind == ScriptAcquireShared && v != string(node.SharedMark)+s.token {
			a.report(n, s.key, "a shared join set %q to %q, not the shared mark and its token %q", s.key, v, s.token)
		}
		nd.keys[s.key] = keyState{known: true, token: v}
	case cmd == "pexpire":
		a.checkShared(n, nd, s, "a shared holder's script set the TTL of")
	case cmd == "del":
		a.checkShared(n, nd, s, "a shared release deleted")
		nd.keys[s.key] = keyState{known: true}
	}
}

// checkShared verifies that the key of s holds shared holders on node n
// (its value starts with node.SharedMark).
func (a *Audit) checkShared(n int, nd *auditNode, s *openScript, what string) {
	st := nd.keys[s.key]
	if !st.known {
		a.stats.Unchecked++
		return
	}
	a.stats.Checked++
	if !node.SharedValue(st.token) {
		held := "was absent"
		if st.token != "" {
			held = fmt.Sprintf("held token %q alone", st.token)
		}
		a.report(n, s.key, "%s %q for shared holder %q while the key %s", what, s.key, s.token, held)
	}
}

// acquireSession follows a session acquire's commands: GET the lock key
// (and, for a session lock's value, its session key); if free: GET the
// session key, then PEXPIRE it or INCR the sequence and SET it, then SET
// the lock key to the token's session value.
func (a *Audit) acquireSession(nd *auditNode, s *openScript, cmd string, e Entry) {
	if cmd != "set" || len(e.Args) < 3 || len(s.keys) < 2 {
		return
	}
	switch e.Args[1] {
	case s.key:
		if s.key != "" {
			nd.keys[s.key] = keyState{known: true, token: s.token}
		}
	case s.keys[1]:
		nd.keys[s.keys[1]] = keyState{known: true, token: e.Args[2]}
	}
}

// check verifies that the key of s holds s's token on node n.
func (a *Audit) check(n int, nd *auditNode, s *openScript, what string) {
	st := nd.keys[s.key]
	if !st.known {
		a.stats.Unchecked++
		return
	}
	a.stats.Checked++
	if st.token != s.token {
		held := "was absent"
		switch {
		case node.SharedValue(st.token):
			held = fmt.Sprintf("held shared holders (%q)", st.token)
		case st.token != "":
			held = fmt.Sprintf("held token %q", st.token)
		}
		a.report(n, s.key, "%s %q for token %q while the key %s", what, s.key, s.token, held)
	}
}

func (a *Audit) openScript(cmd string, args []string) *openScript {
	s := &openScript{kind: ScriptOther}
	if len(args) < 3 {
		return s
	}
	id := args[1]
	if cmd == "eval" || cmd == "eval_ro" {
		sum := sha1.Sum([]byte(id))
		id = hex.EncodeToString(sum[:])
	}
	s.kind = a.cfg.Scripts[strings.ToLower(id)]
	nkeys, err := strconv.Atoi(args[2])
	if err != nil || nkeys < 1 || len(args) < 3+nkeys {
		return s
	}
	s.keys, s.argv = args[3:3+nkeys], args[3+nkeys:]
	if k := args[3]; a.isLockKey(k) || s.kind == ScriptRenewSession && a.isSessionKey(k) {
		s.key = k
	}
	if len(s.argv) > 0 {
		s.token = s.argv[0]
	}
	if s.kind == ScriptLeave {
		s.token = string(node.Handed) + s.token // the key handed to the waiter
	}
	return s
}

// writeCommands are the commands that may change a string key's value or
// TTL, with the positions of the keys they write (0: all arguments).
var writeCommands = map[string]int{
	"set": 1, "setnx": 1, "setex": 1, "psetex": 1, "getset": 1, "getdel": 1, "getex": 1,
	"append": 1, "setrange": 1, "incr": 1, "incrby": 1, "decr": 1, "decrby": 1, "incrbyfloat": 1,
	"del": 0, "unlink": 0, "expire": 1, "pexpire": 1, "expireat": 1, "pexpireat": 1, "persist": 1,
	"rename": 0, "renamenx": 0, "move": 1, "copy": 2, "restore": 1,
}

// clientWrite handles a command sent by a client outside any script.
func (a *Audit) clientWrite(n int, nd *auditNode, cmd string, e Entry) {
	if cmd == "flushall" || cmd == "flushdb" || cmd == "swapdb" {
		clear(nd.keys)
		a.external(n, "", "%s from %s removed every lock key", strings.ToUpper(cmd), e.Source)
		return
	}
	a.guardedWrites(nd, cmd, e, func(k string) {
		if cmd == "set" && hasArg(e.Args[2:], "nx") && a.isLockKey(k) {
			return // an unfenced acquire: whether it set the key does not show
		}
		a.external(n, k, "%s %q from %s: a lock key changed outside quorumlock's token-checked scripts", strings.ToUpper(cmd), k, e.Source)
	})
}

// guardedWrites calls changed for each guarded key that cmd writes, after
// forgetting what the audit knew of its value.
func (a *Audit) guardedWrites(nd *auditNode, cmd string, e Entry, changed func(k string)) {
	pos, ok := writeCommands[cmd]
	if !ok {
		return
	}
	for _, k := range writtenKeys(e.Args, pos) {
		if a.isGuarded(k) {
			nd.keys[k] = keyState{}
			changed(k)
		}
	}
}

// external counts a change made outside the lock scripts and reports it
// unless such changes are allowed.
func (a *Audit) external(n int, key, format string, args ...any) {
	a.stats.External++
	if !a.cfg.AllowExternal {
		a.report(n, key, format, args...)
	}
}

// scriptWrite handles a command from a script that is not a lock script.
func (a *Audit) scriptWrite(n int, nd *auditNode, cmd string, e Entry, who string) {
	a.guardedWrites(nd, cmd, e, func(k string) {
		a.external(n, k, "%s %q by %s", strings.ToUpper(cmd), k, who)
	})
}

func writtenKeys(args []string, pos int) []string {
	if pos == 0 {
		return args[1:]
	}
	if pos < len(args) {
		return args[pos : pos+1]
	}
	return nil
}

func hasArg(args []string, want string) bool {
	for _, a := range args {
		if strings.EqualFold(a, want) {
			return true
		}
	}
	return false
}
