package history

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Kind is what a lock operation did.
type Kind uint8

// The kinds of lock operations.
const (
	// Acquire is one call of Client.TryLock or Client.Lock (all its rounds).
	Acquire Kind = iota + 1
	// Extend is one call of Lock.Extend.
	Extend
	// Release is one call of Lock.Release.
	Release
	// Abandon marks the death of a holder: from End on, it neither uses
	// nor releases the lock; Start and End are the moment it died.
	Abandon
	// Crash marks the death of a whole client (its process): from End on,
	// nothing it sends reaches a node, so it cleans up nothing; its keys
	// are left to expire (L2 stops judging them, L1 bounds them). Only
	// Client, Start and End are set.
	Crash
)

var kindNames = [...]string{"?", "acquire", "extend", "release", "abandon", "crash"}

// String returns the kind's name, as "acquire".
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", k)
}

// Outcome is how a lock operation ended.
type Outcome uint8

// The outcomes of lock operations.
const (
	// OK: the call returned success.
	OK Outcome = iota + 1
	// Failed: the call reported a definite failure (ErrNotAcquired,
	// ErrNotHeld).
	Failed
	// Lost: an extend reported ErrLockLost.
	Lost
	// Indefinite: the call failed in a way that says nothing about the
	// nodes (context ended, client closed, unexpected error).
	Indefinite
)

var outcomeNames = [...]string{"?", "ok", "failed", "lost", "indefinite"}

// String returns the outcome's name, as "ok".
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return fmt.Sprintf("Outcome(%d)", o)
}

// Op is one lock operation of one client. Times are on the History's clock
// (see History.Now): Start is read just before the call, End just after it
// returned.
type Op struct {
	Client string
	Key    string // the lock's key as the caller named it; of several keys, the first
	// Keys are the keys of a lock of several keys (Client.TryLockAll,
	// LockAll, DoAll), in the caller's order, Key being the first; nil for
	// a lock of one key. Such a lock holds each of them: Check judges it
	// as a holder of every one (S1, S4, LIN, SEC).
	Keys []string
	// Shared says the lock is one of its key's shared holders
	// (redlock.Shared, Lock.Shared): Check lets shared holders of a key
	// overlap each other, and no lock held alone overlap any of them. A
	// failed acquire recorded by Recorder.AcquireShared has it too (LV
	// judges the refusals of shared holders).
	Shared bool
	// Semaphore and Permits mark a permit of a counting semaphore
	// (Client.Semaphore; Lock.Permit): Semaphore is its name, Permits its
	// number of permits (0 for any other lock), and Key the permit's own
	// key, PermitKey(Semaphore, Lock.Permit()) (a failed acquire, which
	// took no permit: the name). Check judges each permit's key as a lock
	// of its own (S1, S2, S3, L1, L2, LIN, SEC) and each semaphore as a
	// whole (SEM: never more than Permits windows at once). Permits have no
	// fence (S4 leaves them out).
	Semaphore string
	Permits   int
	// Election marks a leadership (Client.Campaign): Key is the election's
	// name, the lock's Fence its term, and the description its token
	// carries (node.SplitToken) the leader's value (ELE).
	Election bool
	Kind     Kind
	Start    time.Duration
	End      time.Duration
	Outcome  Outcome
	// Token is the lock's token: for an acquire, the winning round's (empty
	// when none won).
	Token string
	// Fence is the lock's fencing token (0 without fencing).
	Fence uint64
	// TTL is the TTL the acquire or extend asked for; 0 when unknown (a
	// failed call with per-call options): Check then does not judge its
	// validity window, and takes the run's longest TTL for its leftovers.
	TTL time.Duration
	// Deadline is the lock's Deadline after the operation, on the History's
	// clock (History.Since(lock.Deadline())); 0 when the operation left no
	// lock (a failed acquire).
	Deadline time.Duration
	// Tried holds the tokens of an acquire's rounds that did not win: none
	// of them may be left on a node (L2).
	Tried []string
	// Quorum and Agreed come from the *redlock.QuorumError of a failed
	// operation (0 when there was none).
	Quorum, Agreed int
	// Err is the call's error, if any.
	Err string
	// Session is the session key of a session lock (redlock's renewal
	// sessions, docs/safety.md): its deadline moves with its session's
	// renewals, which the History learns from Leases and ReplyRenew
	// replies. Empty for every other lock.
	Session string
	// Wait is an acquire call's wait: 0 for one round (TryLock,
	// TryLockAll, TryAcquire), < 0 for a call that waits without a budget
	// of its own (Lock, Do, Acquire), else its WithMaxWait budget. The
	// Recorder sets it; LV tells by it the Lock calls that wait in a key's
	// line from the calls that never do.
	Wait time.Duration
	// Resumed marks an Extend that Recorder.Resume recorded: a handle made
	// from a token (Client.Resume). A successful one whose token no
	// acquisition won is judged as a lock held alone of its own, from its
	// return (see Check).
	Resumed bool
}

// keys returns every key of the lock the section ran under.
func (s *Section) keys() []string { return keysOr(s.Keys, s.Key) }

// keysOr is keys, or key alone when keys is empty.
func keysOr(keys []string, key string) []string {
	if len(keys) == 0 {
		return []string{key}
	}
	return keys
}

// Lease is a session lock's Deadline as its holder (or a watcher on its
// behalf) read it: the lock's window lasts at least until the latest
// Deadline read before its Release started (S1, LIN), and each Deadline
// read while it lay ahead must be backed by a quorum of the session's
// confirmations (S2). Record one whenever the value read changes, and once
// after the lock's Done closed (with Done set).
type Lease struct {
	Client string
	Key    string
	Token  string
	// At is when the Deadline was read, Deadline what it said, both on the
	// History's clock.
	At, Deadline time.Duration
	// Done: the lock's Done had closed when it was read (the lease ended,
	// lost or released, no later than At). A holder does not act under a
	// lock it saw lost, so its window ends by At.
	Done bool
}

// FenceResult is what a fenced resource did with a critical section's write.
type FenceResult uint8

// The results of a fenced write.
const (
	// NotWritten: the section wrote nothing to the fenced resource.
	NotWritten FenceResult = iota
	// Accepted: the resource accepted the write (fence.Write returned nil).
	Accepted
	// Refused: the resource refused the write as stale (fence.ErrStale).
	Refused
)

// Section is one critical section run under a lock: it read a counter
// guarded by the lock (Counted) and, if Wrote, wrote Read+1 back in a
// separate step, so that two holders inside it at once lose an increment
// (S5); it may also have written a fenced resource (Fenced).
type Section struct {
	Client string
	// Key is the key whose guarded counter the section read (S5, LIN).
	Key string
	// Keys, when the holder's lock has several keys, lists them all (Key
	// among them): no section of another lock of any of them may overlap
	// this one (SEC). Nil for a lock of one key.
	Keys []string
	// Shared says the holder is a shared holder of Key (redlock.Shared):
	// its section may overlap those of other shared holders, never one of
	// a lock held alone (SEC). A shared holder's section only reads the
	// guarded counter (Wrote false): shared holders are readers.
	Shared bool
	// Semaphore and Permits: the holder holds a permit of the semaphore
	// Semaphore, of Permits permits (Key is the permit's key, PermitKey):
	// at most Permits sections of one semaphore may overlap (SEM).
	Semaphore string
	Permits   int
	Token     string // the holder's lock token
	Fence     uint64 // the holder's fencing token
	Start     time.Duration
	End       time.Duration
	// Counted says the section read the guarded counter: Read is its value.
	// A section that only wrote the fenced resource leaves it false.
	Counted bool
	Read    int64
	// Wrote says the counter write (Read+1) was confirmed; a section that
	// stopped before writing (its deadline was near) has Wrote false and
	// Err empty.
	Wrote bool
	// Unsure says the counter write failed in a way that may have reached
	// the server: the counter may or may not include this section.
	Unsure bool
	// Fenced is the fate of the section's write to the fenced resource.
	Fenced FenceResult
	Err    string
}

// ReplyKind is the kind of a node's reply recorded for S2.
type ReplyKind uint8

// The kinds of node replies.
const (
	// ReplyAcquire is a yes to SET NX (with or without the fencing counter).
	ReplyAcquire ReplyKind = iota + 1
	// ReplyRaise is a yes to the fencing write-back.
	ReplyRaise
	// ReplyExtend is a yes to a token-checked PEXPIRE.
	ReplyExtend
	// ReplyRenew is a yes to a session renewal: Key is the session key,
	// Token the incarnation the node confirmed.
	ReplyRenew
)

// Reply is one node's yes to one client's call, as the client saw it: Start
// just before the call to the node, End just after its answer.
type Reply struct {
	Client string
	Node   int
	Kind   ReplyKind
	Key    string
	Token  string
	Start  time.Duration
	End    time.Duration
	// Session and Inc: for a ReplyAcquire of a session lock, its session
	// key and the incarnation the node answered.
	Session string
	Inc     int64
}

// Observation is a leader of an election as a client read it (ELE): from
// Client.Observe, each leader its channel delivered, in order (Observer
// names the stream: one per Observe call), or from Client.Leader
// (Observer "").
type Observation struct {
	Client   string
	Observer string
	Election string
	Value    string
	Term     uint64
	// Start and End: for Leader, the call's start and return; for
	// Observe, the Observe call's start and when the leader was received
	// (the read behind it began after Start and ended before End).
	Start, End time.Duration
}

// ProbeNode is what one node said, when a holder died, about the dead lock's
// key.
type ProbeNode struct {
	Node int
	// Reached: the node answered GET and PTTL.
	Reached bool
	// Holds: the key held the dead holder's token (for a session lock:
	// named it, and its session key held the incarnation it names).
	Holds bool
	// PTTL is the key's remaining time to live in ms (-1: none); meaningful
	// when Holds. For a session lock, the time the node still holds it:
	// the shorter of the key's and its session key's.
	PTTL int64
	// At is read just before the node was asked.
	At time.Duration
}

// Probe looks at every node right after a holder died (L1).
type Probe struct {
	Key   string
	Token string
	TTL   time.Duration // the lock's TTL
	// Died is when the holder stopped (after its last operation returned).
	Died time.Duration
	// LastTouch is the start of the last operation that may have set the
	// key's TTL on some node: the winning round of the acquire, or the
	// last extend, whatever its outcome.
	LastTouch time.Duration
	Nodes     []ProbeNode
}

// Leftover is a lock key found on a node: by the scan at the end of a run,
// after every client was closed and every fault healed (AddLeftovers), or by
// a sweep during the run (AddSweep).
type Leftover struct {
	Node  int
	Key   string // the Redis key
	Token string // its value
	PTTL  int64  // ms; -1 when the key has no TTL
	// At is when the node was read (with PTTL, it tells when the key
	// landed; see Config.Horizon).
	At time.Duration
	// SessionInc and SessionPTTL: when Token is a session lock's value
	// (see node.ParseSession), what the session key it names held when the node
	// was read ("" when absent) and its PTTL in ms. The key is held exactly
	// while SessionInc is the incarnation it names; otherwise it is free.
	SessionInc  string
	SessionPTTL int64
}

// History is the record of one test run. Its zero value is not usable; make
// one with New. All methods are safe for concurrent use.
type History struct {
	origin time.Time

	mu        sync.Mutex
	ops       []Op
	sections  []Section
	replies   map[string][]Reply // yes-replies by token (renewals: by session key)
	nreplies  int
	leases    []Lease
	probes    []Probe
	leftovers []Leftover
	swept     []Leftover
	sweeps    int
	counters  map[string]int64
	scanned   bool
	acquired  int
	observed  []Observation
	raw       []answer     // answers to classify (answered)
	lines     []LineCmd    // the commands of waiters of Lock (WF)
	refusals  []Refusal    // the nodes' refusals of shared acquires (LV)
	nodeErrs  []NodeError  // the error replies nodes gave (ERR)
	answers   atomic.Int64 // every answer RecordReplies delivered (ERR's cases)
	sizes     []SetSize    // the sizes of the nodes' sets, as sampled (LB)
	samples   int          // the calls of AddSetSizes
	stalls    []Stall      // spans in which the recording process stood still (S2)
}

// Stall is a span, on the History's clock, in which the process that runs
// the clients and records the History stood still (stopped by SIGSTOP, a
// paused VM): it must contain the whole stand-still.
type Stall struct {
	Start, End time.Duration
}

// AddStall records a stall of the recording process. S2 does not count an
// acquire or extend that returned after its deadline because of it: one
// that was under way when the stall began, whose deadline fell within the
// stall, and that returned after it; the library decided before the stall,
// and no code of the process could run to see the deadline pass.
func (h *History) AddStall(s Stall) { add(h, &h.stalls, s) }

// New returns an empty History whose clock starts now.
func New() *History {
	return &History{origin: time.Now(), replies: map[string][]Reply{}, counters: map[string]int64{}}
}

// Now reads the History's clock: the monotonic time since New.
func (h *History) Now() time.Duration { return time.Since(h.origin) }

// Since converts t, which must carry a monotonic clock reading taken in this
// process (as Lock.Deadline does), to the History's clock.
func (h *History) Since(t time.Time) time.Duration { return t.Sub(h.origin) }

// Add records a lock operation.
func (h *History) Add(op Op) {
	h.mu.Lock()
	h.ops = append(h.ops, op)
	if op.Kind == Acquire && op.Outcome == OK {
		h.acquired++
	}
	h.mu.Unlock()
}

// AddSection records a critical section.
func (h *History) AddSection(s Section) { add(h, &h.sections, s) }

// AddReply records a node's yes to a client (S2). Only yes-replies matter:
// a no or an error never counts towards a quorum.
func (h *History) AddReply(r Reply) {
	k := r.Token
	if r.Kind == ReplyRenew {
		k = r.Key
	}
	h.mu.Lock()
	h.replies[k] = append(h.replies[k], r)
	h.nreplies++
	h.mu.Unlock()
}

// AddObservation records a leader as a client read it (ELE); a stream's
// observations must be added in the order they were received.
func (h *History) AddObservation(o Observation) { add(h, &h.observed, o) }

// AddLease records a session lock's Deadline as read (S1, S2, LIN).
func (h *History) AddLease(l Lease) { add(h, &h.leases, l) }

// add appends v to h's list under h's lock.
func add[T any](h *History, list *[]T, v T) {
	h.mu.Lock()
	*list = append(*list, v)
	h.mu.Unlock()
}

// Forget drops the replies recorded for tokens, to save memory: call it with
// the tokens of rounds that did not win, whose replies S2 never needs.
// Replies that arrive later are kept; they cost memory, not correctness.
// A yes to a session acquire is kept: it confirmed its session on the node,
// for every lock of the session, whether or not its own round won.
func (h *History) Forget(tokens []string) {
	h.mu.Lock()
	for _, tok := range tokens {
		kept := slices.DeleteFunc(h.replies[tok], func(r Reply) bool { return r.Session == "" })
		h.nreplies -= len(h.replies[tok]) - len(kept)
		if len(kept) == 0 {
			delete(h.replies, tok)
		} else {
			h.replies[tok] = kept
		}
	}
	h.mu.Unlock()
}

// AddProbe records what the nodes said right after a holder died (L1).
func (h *History) AddProbe(p Probe) { add(h, &h.probes, p) }

// AddLeftovers records the result of the end-of-run scan of one or more
// nodes (L1, L2): every lock key found, which may be none. Calling it at all
// tells Check that a scan was made.
func (h *History) AddLeftovers(ls ...Leftover) {
	h.mu.Lock()
	h.leftovers = append(h.leftovers, ls...)
	h.scanned = true
	h.mu.Unlock()
}

// AddSweep records what one read of one or more nodes during the run found
// (L2): every lock key, with the time it was read (Leftover.At), which may be
// none. A key that holds the token of a failed round or of a released lock
// is a violation when it was read at least Config.Cleanup after the call
// that should have removed it returned.
func (h *History) AddSweep(ls ...Leftover) {
	h.mu.Lock()
	h.swept = append(h.swept, ls...)
	h.sweeps++
	h.mu.Unlock()
}

// SetCounter records the final value of the counter guarded by key's lock
// (S5). Keys whose counter was never set are not checked.
func (h *History) SetCounter(key string, v int64) {
	h.mu.Lock()
	h.counters[key] = v
	h.mu.Unlock()
}

// Stats is a snapshot of a History's size, for progress lines.
type Stats struct {
	Ops, Acquired, Sections, Replies, Leases, Observations int
}

// Stats returns the History's size so far.
func (h *History) Stats() Stats {
	h.mu.Lock()
	defer h.mu.Unlock()
	return Stats{Ops: len(h.ops), Acquired: h.acquired, Sections: len(h.sections), Replies: h.nreplies, Leases: len(h.leases), Observations: len(h.observed)}
}

// snapshot is a copy of the record, for Check.
type snapshot struct {
	ops       []Op
	sections  []Section
	replies   map[string][]Reply
	leases    []Lease
	probes    []Probe
	leftovers []Leftover
	scanned   bool
	swept     []Leftover
	sweeps    int
	counters  map[string]int64
	observed  []Observation
	lines     []LineCmd
	refusals  []Refusal
	nodeErrs  []NodeError
	answers   int
	sizes     []SetSize
	samples   int
	stalls    []Stall
}

func (h *History) snapshot() snapshot {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := snapshot{
		ops:       append([]Op(nil), h.ops...),
		sections:  append([]Section(nil), h.sections...),
		replies:   make(map[string][]Reply, len(h.replies)),
		leases:    append([]Lease(nil), h.leases...),
		probes:    append([]Probe(nil), h.probes...),
		leftovers: append([]Leftover(nil), h.leftovers...),
		scanned:   h.scanned,
		swept:     append([]Leftover(nil), h.swept...),
		sweeps:    h.sweeps,
		counters:  make(map[string]int64, len(h.counters)),
		observed:  append([]Observation(nil), h.observed...),
		// Appended to only: a slice capped at its length shares what
		// it holds with the History without copying it.
		answers: int(h.answers.Load()),
		sizes:   slices.Clip(h.sizes),
		samples: h.samples,
		stalls:  append([]Stall(nil), h.stalls...),
	}
	for k, v := range h.replies {
		s.replies[k] = append([]Reply(nil), v...)
	}
	lines, refusals, errs := classify(h.raw)
	s.lines = append(lines, h.lines...)
	s.refusals = append(refusals, h.refusals...)
	s.nodeErrs = append(errs, h.nodeErrs...)
	for k, v := range h.counters {
		s.counters[k] = v
	}
	return s
}
