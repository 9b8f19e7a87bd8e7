package history

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/quorumlock/quorumlock/drift"
	"github.com/quorumlock/quorumlock/internal/node"
)

// Property names one checked property.
type Property string

// The properties Check verifies (see the package documentation).
const (
	S1  Property = "S1"
	S2  Property = "S2"
	S3  Property = "S3"
	S4  Property = "S4"
	S5  Property = "S5"
	L1  Property = "L1"
	L2  Property = "L2"
	LIN Property = "LIN"
	SEC Property = "SEC"
	SEM Property = "SEM"
	ELE Property = "ELE"
	WF  Property = "WF"
	LB  Property = "LB"
	ERR Property = "ERR"
	LV  Property = "LV"
)

// Properties lists every property in report order.
var Properties = []Property{S1, S2, S3, S4, S5, L1, L2, LIN, SEC, SEM, ELE, WF, LB, ERR, LV}

// Violation is one breach of a property.
type Violation struct {
	Property Property
	Key      string // the lock's key or the Redis key concerned, if any
	Msg      string
}

// String describes the violation on one line.
func (v Violation) String() string { return fmt.Sprintf("%s %s: %s", v.Property, v.Key, v.Msg) }

// Config says how the recorded run was set up.
type Config struct {
	// Nodes is the number of Redis nodes of every client.
	Nodes int
	// Quorum is the number of nodes a client needs; 0 means Nodes/2+1.
	Quorum int
	// DriftFactor is the clients' drift factor; 0 means drift.DefaultFactor.
	DriftFactor float64
	// NodeTimeout is the clients' per-node timeout: a request still in
	// flight when its round ended can land up to this long after the
	// round started (L1).
	NodeTimeout time.Duration
	// Cleanup is the bound the library states for its clean-up: how long
	// after a failed acquire call or a Release returned it may still be
	// removing that call's keys in the background (L2). A key found by a
	// sweep (History.AddSweep) holding the token of a failed round or of a
	// released lock is a violation when the sweep read it at least Cleanup
	// after that call returned; with 0, sweeps are not judged. The final
	// scan needs no bound: it comes after every client was closed (which
	// waits for its clean-up) and every fault healed.
	Cleanup time.Duration
	// Horizon is how long after such a call returned the library keeps
	// looking for a late SET of its token; Recheck is how soon after a
	// late SET lands within the horizon the library removes it. A key is
	// judged by when it landed (its PTTL tells: the TTL its call asked
	// for, the shortest of a released lock's calls, less PTTL ago): one
	// that landed within the horizon is a violation once it is
	// seen both Cleanup after the call and Recheck after it landed; one
	// that landed later is left to its TTL by the library's statement
	// (docs/design.md, the leftover bound) and only counted in a note.
	// With 0, every key found after Cleanup is judged.
	Horizon, Recheck time.Duration
	// Fencing says every client used redlock.WithFencing(true): S2 then
	// requires a quorum for the write-back, and S4 is checked (shared
	// holders and semaphores' permits, which have no fence, excepted). An
	// election's leaders (Op.Election) are fenced and checked so without
	// it.
	Fencing bool
	// Replies says the nodes' yes-replies were recorded (History.AddReply)
	// for every client: S2 then counts them.
	Replies bool
	// Audit, if not nil, holds the S3 audit of every node's MONITOR stream.
	Audit *Audit
	// SessionKeyTTL is the TTL a session lock's key is given (it only
	// collects the key once its session has ended); 0 means 10 × the
	// longest TTL any operation asked for, as redlock sets it.
	SessionKeyTTL time.Duration
	// LinTimeout bounds the linearizability check of each independent
	// segment of one key's history; 0 means 30 s. A segment that times out
	// is reported in the notes, not as a violation.
	LinTimeout time.Duration
	// TolerateOverruns reports two overlapping critical sections as a note
	// instead of an SEC violation when one of them ran past its own lock's
	// validity (the holder's process stalled longer than the lock's
	// validity, which docs/safety.md assumes it does not; quorumlock's own
	// chaos suite sets it). Leave it false to hear about code that acts
	// under a lock it may no longer hold.
	TolerateOverruns bool
	// WritersFirst asks for WF, judged on the commands of waiters of Lock
	// that RecordReplies records: set it for runs in which no node loses
	// its data (no restart without it, no flush), which WF's rule assumes.
	WritersFirst bool
	// LineMax and SharedMax are the bounds the nodes keep on the sets
	// beside a lock key (internal/scripts' LineMax and SharedMax, or the
	// lower ones a test runs): LB judges the sizes AddSetSizes recorded
	// against them; WF and LV do not judge a key whose line may have been
	// full (LineMax or more Lock calls of it in the run, as Op.Wait tells
	// them), nor LV a key with SharedMax or more shared acquire calls. 0:
	// no bound (LB not checked).
	LineMax, SharedMax int
	// ErrorReplies says the run injects no error reply (no READONLY,
	// NOPERM, OOM, LOADING...): every error reply RecordReplies saw is then
	// an ERR violation.
	ErrorReplies bool
	// Calm says the run had no fault at all: no node fault, no partition,
	// and every command landed within CalmLatency of being sent and was
	// answered. LV is judged in calm runs only.
	Calm        bool
	CalmLatency time.Duration
}

// Report is the outcome of Check. It is built by one Check call and only
// read afterwards: reading it from many goroutines is safe.
type Report struct {
	Ops, Acquired, FailedAcquires, Extends, Releases, Abandoned, Crashed, Sections int
	// Permits counts the permits held (successful acquisitions of a
	// semaphore's permit) and Semaphores the semaphores they were of;
	// MostHolders is, per semaphore, the most permit windows that overlapped
	// at one instant (SEM).
	Permits, Semaphores int
	MostHolders         map[string]Crowd
	// Leaders counts the leaderships won (Campaign) and Elections the
	// elections they were of; Observed counts the leaders read (Observe,
	// Leader) and Matched those the checker matched to a leader (ELE).
	Leaders, Elections, Observed, Matched int
	// Checked counts, per property, the cases it examined (pairs of
	// successive holders, successful operations, audited changes...).
	Checked map[Property]int
	// Skipped says why a property was not checked, when it was not.
	Skipped map[Property]string
	// Violations holds up to 50 violations per property; Count tells how
	// many there were.
	Violations []Violation
	// Notes are observations that are not violations (assumptions broken
	// by the run, checks that could not decide).
	Notes  []string
	counts map[Property]int
}

// maxPerProperty bounds the violations a Report keeps per property.
const maxPerProperty = 50

// Count returns the number of violations of p.
func (r *Report) Count(p Property) int { return r.counts[p] }

// Total returns the number of violations of all properties.
func (r *Report) Total() int {
	n := 0
	for _, c := range r.counts {
		n += c
	}
	return n
}

func (r *Report) add(p Property, key, format string, args ...any) {
	r.counts[p]++
	if r.counts[p] <= maxPerProperty {
		r.Violations = append(r.Violations, Violation{Property: p, Key: key, Msg: fmt.Sprintf(format, args...)})
	}
}

func (r *Report) note(format string, args ...any) {
	if len(r.Notes) < 200 {
		r.Notes = append(r.Notes, fmt.Sprintf(format, args...))
	}
}

// String is a human-readable summary: one line per property, then the
// violations kept and the notes.
func (r *Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d operations: %d acquisitions (%d failed attempts), %d extends, %d releases, %d holders died (%d with their client), %d critical sections\n",
		r.Ops, r.Acquired, r.FailedAcquires, r.Extends, r.Releases, r.Abandoned, r.Crashed, r.Sections)
	if r.Permits+r.Leaders+r.Observed > 0 {
		fmt.Fprintf(&b, "%d permits held of %d semaphores (most holders at once: %s), %d leaders of %d elections, %d leaders observed (%d matched to their leader)\n",
			r.Permits, r.Semaphores, mostHolders(r.MostHolders), r.Leaders, r.Elections, r.Observed, r.Matched)
	}
	for _, p := range Properties {
		if why, ok := r.Skipped[p]; ok {
			fmt.Fprintf(&b, "  %-3s not checked: %s\n", p, why)
			continue
		}
		fmt.Fprintf(&b, "  %-3s %7d cases checked, %d violations\n", p, r.Checked[p], r.counts[p])
	}
	for _, v := range r.Violations {
		fmt.Fprintf(&b, "  VIOLATION %s\n", v)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "  note: %s\n", n)
	}
	return b.String()
}

// holding is one successful acquisition and what became of it.
type holding struct {
	key, client, token string
	keys               []string // a lock of several keys: all of them; else nil
	shared             bool     // a shared holder (Op.Shared)
	sem                string   // a semaphore's permit: the semaphore's name (Op.Semaphore)
	permits            int      // and its number of permits
	election           bool     // a leadership (Op.Election)
	fence              uint64
	ttl                time.Duration
	start, ret         time.Duration // the acquire call's start and return
	round              time.Duration // start of the winning round
	deadline           time.Duration // the latest deadline the holder was given
	end                time.Duration // end of its window
	released           bool
	session            string // a session lock's session key, else ""
	resumed            bool   // a handle of its own from Client.Resume (no fence)
}

func (x *holding) String() string {
	keys := ""
	if len(x.keys) > 0 {
		keys = fmt.Sprintf("keys %s, ", strings.Join(x.keys, "+"))
	}
	if x.shared {
		keys = "shared, " + keys
	}
	if x.permits > 0 {
		keys = fmt.Sprintf("permit %s of %d, ", x.key, x.permits) + keys
	}
	return fmt.Sprintf("%s (%stoken %s, fence %d, window [%v, %v])", x.client, keys, x.token, x.fence, us(x.ret), us(x.end))
}

// us rounds d to the microsecond, for messages.
func us(d time.Duration) time.Duration { return d.Round(time.Microsecond) }

// Check checks the History against every property it has the data for and
// returns the Report; it does not change h and may be called while
// recording goes on (it checks a snapshot).
//
// A shared holder (Op.Shared) may overlap the other shared holders of its
// key; a lock held alone may overlap no other lock of any of its keys,
// shared or not (S1, SEC), and LIN models each key as a read/write lock.
// Shared holders have no fence (S4 leaves them out).
//
// A handle made by Client.Resume (an Extend with Op.Resumed) is the lock
// whose token it names; when no acquisition won that token (a value read
// from a node, not a lock's token), a successful one is a lock held alone
// of its own, from its return.
//
// A lock of several keys (Op.Keys) is judged as a holder of each of them:
// its window must overlap no other lock's window on any of its keys (S1),
// and no lock of one key and no other lock of several keys that shares a
// key with it, so that two sets that share one key are judged on that key;
// its fence must exceed those of the earlier holders of each key (S4);
// each key's mutex model takes its acquisition and release (LIN); a
// critical section under it excludes every section of another lock on any
// of its keys (SEC, Section.Keys); and each of its keys found holding its
// token after its release, or a failed round's token, is a leftover (L2).
//
// The window of a successful acquisition (S1, S4, LIN) runs from the moment
// the acquire call returned to the end of its claim: the latest deadline it
// was given (by the acquire or a successful extend; a failed extend never
// moves it later), or the start of its release if that came first. A
// session lock's deadline moves with its session's renewals, which no
// operation records: every Deadline its holder read (Lease) counts as
// given, so its window ends at the latest of them, at its release's start,
// or once its holder saw its Done closed (a lock the client itself declared
// lost is not held against it), whichever comes first. A holder
// that died keeps its window to its deadline: a paused process that wakes
// up may act until then. The window starts at the return, not at the call's
// start: a correct client may start its winning round before the previous
// holder's window ends (its SET lands after the delete or the expiry, or a
// Lock call was retrying all along), so a window from the start would report
// correct runs; before its call returns, a client cannot act under the lock.
// The end, on the other hand, is as late as the holder could believe it
// holds the lock, so that every overlap a holder could act in is found.
// The linearizability check (LIN) is tighter on the start: there the
// acquisition may take effect anywhere between the start of its winning
// round (derived from its first deadline: round = deadline − (TTL −
// allowance)) and its return, as the SETs are sent after the round starts.
func Check(h *History, cfg Config) *Report {
	if cfg.Quorum == 0 {
		cfg.Quorum = cfg.Nodes/2 + 1
	}
	if cfg.DriftFactor == 0 {
		cfg.DriftFactor = drift.DefaultFactor
	}
	if cfg.LinTimeout == 0 {
		cfg.LinTimeout = 30 * time.Second
	}
	s := h.snapshot()
	r := &Report{Checked: map[Property]int{}, Skipped: map[Property]string{}, counts: map[Property]int{}}
	r.Ops = len(s.ops)
	r.Sections = len(s.sections)
	if cfg.SessionKeyTTL == 0 {
		cfg.SessionKeyTTL = 10 * maxTTL(s.ops)
	}
	holds, byKey := holdings(s.ops, s.leases, cfg, r)
	checkS1(byKey, r)
	checkS2(s, cfg, r)
	checkS3(cfg, r)
	checkS4(byKey, s.sections, holds, cfg, r)
	checkS5(s, holds, r)
	checkL1(s, cfg, r)
	checkL2(s, cfg, r)
	checkLinearizable(byKey, s.sections, holds, cfg, r)
	checkSections(s.sections, holds, cfg, r)
	checkSemaphores(s, holds, cfg, r)
	checkElections(s, byKey, r)
	checkWF(s, byKey, cfg, r)
	checkLB(s, cfg, r)
	checkERR(s, cfg, r)
	checkLV(s, byKey, cfg, r)
	return r
}

// maxTTL is the longest TTL any operation asked for.
func maxTTL(ops []Op) time.Duration {
	var m time.Duration
	for _, op := range ops {
		m = max(m, op.TTL)
	}
	return m
}

func allowance(ttl time.Duration, cfg Config) time.Duration {
	return drift.Allowance(ttl, cfg.DriftFactor)
}

// holdings gathers the successful acquisitions, by token and by key (each
// key's sorted by return). A lock of several keys is one holding (one
// token), listed under each of its keys: it is judged against every holder
// of each.
func holdings(ops []Op, leases []Lease, cfg Config, r *Report) (map[string]*holding, map[string][]*holding) {
	holds := map[string]*holding{}
	for _, op := range ops {
		switch {
		case op.Kind == Acquire && op.Outcome == OK:
			r.Acquired++
			holds[op.Token] = &holding{
				key: op.Key, keys: op.Keys, shared: op.Shared, client: op.Client, token: op.Token, fence: op.Fence, ttl: op.TTL,
				sem: op.Semaphore, permits: op.Permits, election: op.Election,
				start: op.Start, ret: op.End, deadline: op.Deadline, session: op.Session,
				round: max(op.Start, op.Deadline-(op.TTL-allowance(op.TTL, cfg))),
			}
		case op.Kind == Acquire:
			r.FailedAcquires++
		case op.Kind == Extend:
			r.Extends++
		case op.Kind == Release:
			r.Releases++
		case op.Kind == Abandon:
			r.Abandoned++
		case op.Kind == Crash:
			r.Crashed++
		}
	}
	resumedHoldings(ops, holds, cfg)
	relStart := map[string]time.Duration{}
	for _, op := range ops {
		x := holds[op.Token]
		if x == nil || op.Token == "" {
			continue
		}
		switch op.Kind {
		case Extend:
			x.deadline = max(x.deadline, op.Deadline)
		case Release:
			if st, ok := relStart[op.Token]; !ok || op.Start < st {
				relStart[op.Token] = op.Start
			}
		}
	}
	doneAt := applyLeases(holds, leases)
	byKey := map[string][]*holding{}
	for tok, x := range holds {
		x.end = x.deadline
		if st, ok := relStart[tok]; ok && st < x.end {
			x.end, x.released = st, true
		}
		if at, ok := doneAt[tok]; ok && at < x.end {
			x.end = at
		}
		for _, k := range keysOr(x.keys, x.key) {
			byKey[k] = append(byKey[k], x)
		}
	}
	for _, xs := range byKey {
		slices.SortFunc(xs, func(a, b *holding) int { return cmp.Or(cmp.Compare(a.ret, b.ret), strings.Compare(a.token, b.token)) })
	}
	return holds, byKey
}

// applyLeases moves each holding's deadline to the latest one its holder
// read, and returns, by token, the first read after its Done closed.
func applyLeases(holds map[string]*holding, leases []Lease) map[string]time.Duration {
	doneAt := map[string]time.Duration{}
	for _, ls := range leases {
		x := holds[ls.Token]
		if x == nil {
			continue
		}
		x.deadline = max(x.deadline, ls.Deadline)
		if at, ok := doneAt[ls.Token]; ls.Done && (!ok || ls.At < at) {
			doneAt[ls.Token] = ls.At
		}
	}
	return doneAt
}

// checkS1: sweeping each key's holdings in order of return, a holding that
// returned before the latest window end seen so far overlaps that window;
// shared holders overlap each other freely, so a shared holding is held
// against the latest window of a lock held alone only. (If holdings A and
// B, B returning later, overlap and one is held alone, B returned before
// A's end: the sweep reaches B with a window at least as late as A's of
// the kind B must not overlap.)
func checkS1(byKey map[string][]*holding, r *Report) {
	for key, xs := range byKey {
		var last, lastAlone *holding // the holdings seen so far whose windows end last (of any kind; held alone)
		for _, x := range xs {
			against := last
			if x.shared {
				against = lastAlone
			}
			if against != nil {
				r.Checked[S1]++
				if x.ret < against.end {
					r.add(S1, key, "%s acquired at %v, %v before the window of %s ended", x, us(x.ret), us(against.end-x.ret), against)
				}
			}
			if last == nil || x.end > last.end {
				last = x
			}
			if !x.shared && (lastAlone == nil || x.end > lastAlone.end) {
				lastAlone = x
			}
		}
	}
}

// checkS2: every successful acquire and extend returned with validity left,
// its deadline is no later than the start of its round (its first request)
// + TTL − allowance, and (with replies recorded) a quorum of nodes said yes
// before it returned: to the SET, and with fencing to the write-back.
//
// A session lock's deadline is the q-th latest of its nodes' session
// confirmations (an acquire or a renewal that found the session key
// holding the lock's incarnation there), each good for TTL − allowance from
// the start of its round: so its acquire needs a quorum of yes to the SET,
// and every deadline it was given (by the acquire, an extend or a Lease
// read while it lay ahead) needs a quorum of nodes whose acquire of the lock
// answered the incarnation that a confirmation then repeated, in a round
// started no earlier than deadline − (TTL − allowance), before the deadline
// was given.
func checkS2(s snapshot, cfg Config, r *Report) {
	sc := newSessionConfs(s)
	stalled := 0
	for _, op := range s.ops {
		if op.Outcome != OK || (op.Kind != Acquire && op.Kind != Extend) {
			continue
		}
		r.Checked[S2]++
		if op.Deadline <= op.End && stalledPast(s.stalls, op) {
			stalled++
		} else if op.Deadline <= op.End {
			r.add(S2, op.Key, "%s %s by %s (token %s) returned success with no validity left: deadline %v, returned at %v%s", op.Kind, op.Key, op.Client, op.Token, op.Deadline, op.End, afterStall(s.stalls, op))
		}
		if op.TTL <= 0 { // TTL unknown: the window cannot be judged
			r.note("S2: %s by %s (token %s) has no Op.TTL: its validity window not judged", op.Kind, op.Client, op.Token)
			continue
		}
		earned := op.Deadline - (op.TTL - allowance(op.TTL, cfg)) // the round's start, as the deadline implies
		if earned < op.Start {
			r.add(S2, op.Key, "%s by %s (token %s): deadline %v is less than TTL − allowance after the call started (%v), assuming the TTL %v recorded in Op.TTL (a Recorder records the lock's own; a hand-written Op must carry the TTL the call asked for)", op.Kind, op.Client, op.Token, op.Deadline, op.Start, op.TTL)
		}
		if op.Session == "" && earned > op.End {
			r.add(S2, op.Key, "%s by %s (token %s): deadline %v is more than TTL − allowance after the call returned (%v), assuming the TTL %v in Op.TTL: its validity was counted from after its round", op.Kind, op.Client, op.Token, op.Deadline, op.End, op.TTL)
		}
		if !cfg.Replies {
			continue
		}
		if op.Session != "" {
			if op.Kind == Acquire {
				checkQuorum(s, cfg, r, op, ReplyAcquire, -1)
			}
			if n := sc.vouching(op.Token, op.Session, earned, op.End); n < cfg.Quorum {
				r.add(S2, op.Key, "%s by %s (session lock, token %s) returned deadline %v, but only %d nodes had confirmed its session's incarnation in a round started at or after %v, quorum %d", op.Kind, op.Client, op.Token, us(op.Deadline), n, us(earned), cfg.Quorum)
			}
			continue
		}
		kinds := []ReplyKind{ReplyAcquire}
		if op.Kind == Extend {
			kinds = []ReplyKind{ReplyExtend}
		} else if cfg.Fencing && !op.Shared && op.Permits == 0 || op.Election { // shared holders and permits have no fence; a leader always has
			kinds = append(kinds, ReplyRaise)
		}
		for _, k := range kinds {
			checkQuorum(s, cfg, r, op, k, earned)
		}
	}
	checkLeases(s, sc, cfg, r)
	if !cfg.Replies {
		r.note("S2: node replies were not recorded: quorums not counted, validity checked")
	}
	if stalled > 0 {
		r.note("S2: %d successes returned after their deadline because the recording process stood still across it (History.AddStall): their return not judged", stalled)
	}
}

// afterStall says how long before op's deadline the last stall of the
// recording process that op spanned ended, if one did: a deadline that
// passed as the process caught up ("" when none).
func afterStall(stalls []Stall, op Op) string {
	for _, st := range slices.Backward(stalls) {
		if op.Start <= st.Start && st.End <= op.Deadline {
			return fmt.Sprintf(" (it spanned a stall of the recording process, %v to %v, that ended %v before the deadline)", st.Start, st.End, op.Deadline-st.End)
		}
	}
	return ""
}

// stalledPast reports whether op was under way when a stall began, its
// deadline fell within that stall, and it returned after it (see AddStall).
func stalledPast(stalls []Stall, op Op) bool {
	return slices.ContainsFunc(stalls, func(st Stall) bool {
		return op.Start <= st.Start && st.Start < op.Deadline && op.Deadline <= st.End && st.End <= op.End
	})
}

// checkQuorum: op (a success) had a quorum of yes of kind k, sent after it
// started and seen before it returned; with earned ≥ 0, a quorum of them
// was sent no earlier than the round its deadline counts from. (A yes sent
// earlier, within the call, is another round's of the same lock: an
// auto-extended lock's renewal that the call waited for. It cannot back
// this deadline, and it does not disprove it either.)
func checkQuorum(s snapshot, cfg Config, r *Report, op Op, k ReplyKind, earned time.Duration) {
	nodes, since := map[int]bool{}, map[int]bool{}
	first := time.Duration(-1)
	for _, rep := range s.replies[op.Token] {
		if rep.Kind != k || rep.End > op.End || rep.Start < op.Start {
			continue
		}
		nodes[rep.Node] = true
		if rep.Start >= earned {
			since[rep.Node] = true
		}
		if first < 0 || rep.Start < first {
			first = rep.Start
		}
	}
	if len(nodes) < cfg.Quorum {
		r.add(S2, op.Key, "%s by %s (token %s) succeeded with %d yes (%s) before it returned, quorum %d", op.Kind, op.Client, op.Token, len(nodes), replyName(k), cfg.Quorum)
		return
	}
	if k != ReplyRaise && earned >= 0 && len(since) < cfg.Quorum {
		r.add(S2, op.Key, "%s by %s (token %s): its deadline %v counts the TTL from %v, but only %d nodes said yes to requests sent at or after it (its first request left at %v), quorum %d", op.Kind, op.Client, op.Token, op.Deadline, earned, len(since), first, cfg.Quorum)
	}
}

// checkLeases: every deadline a session lock's holder read while it lay
// ahead, before the lock's release started, is backed by a quorum of
// session confirmations (see checkS2).
func checkLeases(s snapshot, sc sessionConfs, cfg Config, r *Report) {
	if len(s.leases) == 0 {
		return
	}
	type lock struct {
		session    string
		ttl        time.Duration
		relStart   time.Duration
		hasRelease bool
	}
	locks := map[string]*lock{}
	for _, op := range s.ops {
		if op.Kind == Acquire && op.Outcome == OK && op.Session != "" {
			locks[op.Token] = &lock{session: op.Session, ttl: op.TTL}
		}
	}
	for _, op := range s.ops {
		if x := locks[op.Token]; x != nil && op.Kind == Release && (!x.hasRelease || op.Start < x.relStart) {
			x.relStart, x.hasRelease = op.Start, true
		}
	}
	checked := 0
	for _, ls := range s.leases {
		x := locks[ls.Token]
		if x == nil || ls.Deadline <= ls.At || x.hasRelease && ls.At >= x.relStart {
			continue
		}
		checked++
		r.Checked[S2]++
		if !cfg.Replies {
			continue
		}
		earned := ls.Deadline - (x.ttl - allowance(x.ttl, cfg))
		if n := sc.vouching(ls.Token, x.session, earned, ls.At); n < cfg.Quorum {
			r.add(S2, ls.Key, "%s's session lock (token %s) read deadline %v at %v, but only %d nodes had confirmed its session's incarnation in a round started at or after %v, quorum %d", ls.Client, ls.Token, us(ls.Deadline), us(ls.At), n, us(earned), cfg.Quorum)
		}
	}
	r.note("S2: %d deadlines of session locks read while they lay ahead, each checked against the session's confirmations", checked)
}

// conf is one node's confirmation of a session's incarnation: a yes to a
// session acquire or renewal, sent at start, seen at end.
type conf struct {
	inc        string
	start, end time.Duration
}

// sessionConfs holds the session confirmations of a run: per session key,
// per node; and per session lock's token, per node, its acquire's yes.
type sessionConfs struct {
	confs map[string]map[int][]conf
	locks map[string]map[int]conf
}

func newSessionConfs(s snapshot) sessionConfs {
	sc := sessionConfs{confs: map[string]map[int][]conf{}, locks: map[string]map[int]conf{}}
	add := func(sess string, n int, c conf) {
		if sc.confs[sess] == nil {
			sc.confs[sess] = map[int][]conf{}
		}
		sc.confs[sess][n] = append(sc.confs[sess][n], c)
	}
	for _, reps := range s.replies {
		for _, rep := range reps {
			switch {
			case rep.Kind == ReplyRenew:
				add(rep.Key, rep.Node, conf{inc: rep.Token, start: rep.Start, end: rep.End})
			case rep.Kind == ReplyAcquire && rep.Session != "":
				c := conf{inc: fmt.Sprint(rep.Inc), start: rep.Start, end: rep.End}
				add(rep.Session, rep.Node, c)
				if sc.locks[rep.Token] == nil {
					sc.locks[rep.Token] = map[int]conf{}
				}
				sc.locks[rep.Token][rep.Node] = c
			}
		}
	}
	return sc
}

// vouching counts the nodes that, by at, had answered the acquire of
// session lock token with an incarnation that a confirmation sent at or
// after earned, and seen by at, repeated.
func (sc sessionConfs) vouching(token, session string, earned, at time.Duration) int {
	n := 0
	for node, acq := range sc.locks[token] {
		if acq.end > at {
			continue
		}
		for _, c := range sc.confs[session][node] {
			if c.inc == acq.inc && c.start >= earned && c.end <= at {
				n++
				break
			}
		}
	}
	return n
}

func replyName(k ReplyKind) string {
	switch k {
	case ReplyAcquire:
		return "SET NX"
	case ReplyRaise:
		return "fence write-back"
	case ReplyRenew:
		return "session renewal"
	}
	return "PEXPIRE"
}

func checkS3(cfg Config, r *Report) {
	if cfg.Audit == nil {
		r.Skipped[S3] = "no MONITOR audit (Config.Audit, fed by StartMonitor per node)"
		return
	}
	st := cfg.Audit.Stats()
	found, n := cfg.Audit.Findings()
	r.Checked[S3] = st.Checked
	r.counts[S3] = n
	r.Violations = append(r.Violations, found...)
	r.note("S3: %d MONITOR entries; %d script changes audited against the key's known token, %d not decidable (after %d stream gaps), %d writes from outside the scripts, %d script commands without their call",
		st.Entries, st.Checked, st.Unchecked, st.Gaps, st.External, st.Unattributed)
}

// checkS4: along each key's holdings in order of return, fences strictly
// increase (shared holders and semaphores' permits have no fence and are
// left out: fences order writers). An election's leaders (Op.Election) are
// always fenced, their fences being their terms: their keys are checked
// with fencing off too. (G2 promises B.Fence > A.Fence when B's call started after A
// returned, and, while S1 holds, in the order of the windows, which is the
// order of return.) Refused fenced writes are noted.
func checkS4(byKey map[string][]*holding, sections []Section, holds map[string]*holding, cfg Config, r *Report) {
	elections := false
	for _, x := range holds {
		elections = elections || x.election
	}
	if !cfg.Fencing && !elections {
		r.Skipped[S4] = "fencing off (redlock.WithFencing(true) and Config.Fencing)"
		return
	}
	for key, all := range byKey {
		xs := slices.DeleteFunc(slices.Clone(all), func(x *holding) bool { return x.shared || x.permits > 0 || x.resumed || !cfg.Fencing && !x.election })
		for i, x := range xs {
			if x.fence == 0 {
				r.add(S4, key, "%s got fencing token 0", x)
			}
			if i == 0 {
				continue
			}
			r.Checked[S4]++
			if prev := xs[i-1]; x.fence <= prev.fence {
				r.add(S4, key, "%s got fence %d, not more than the previous holder %s", x, x.fence, prev)
			}
		}
	}
	inside, other := 0, 0
	for _, sec := range sections {
		if sec.Fenced != Refused {
			continue
		}
		if x := holds[sec.Token]; x != nil && sec.End <= x.end {
			inside++
		} else {
			other++
		}
	}
	if inside+other > 0 {
		r.note("fenced resource refused %d writes of holders inside their windows (a later fence had written: see S1/S4) and %d of holders past them", inside, other)
	}
}

// checkS5: each recorded counter equals the number of sections that wrote
// it, give or take those whose write is unsure.
func checkS5(s snapshot, holds map[string]*holding, r *Report) {
	if len(s.counters) == 0 {
		r.Skipped[S5] = "no guarded counter recorded (History.SetCounter)"
		return
	}
	wrote, unsure := map[string]int64{}, map[string]int64{}
	overran := 0
	for _, sec := range s.sections {
		switch {
		case sec.Wrote:
			wrote[sec.Key]++
		case sec.Unsure:
			unsure[sec.Key]++
		}
		if x := holds[sec.Token]; x != nil && sec.End > x.end && (sec.Wrote || sec.Unsure) {
			overran++
		}
	}
	keys := make([]string, 0, len(s.counters))
	for k := range s.counters {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := s.counters[k]
		r.Checked[S5] += int(wrote[k])
		if v < wrote[k] || v > wrote[k]+unsure[k] {
			msg := fmt.Sprintf("the guarded counter is %d, but %d critical sections incremented it", v, wrote[k])
			if unsure[k] > 0 {
				msg += fmt.Sprintf(" (and %d may have)", unsure[k])
			}
			if v < wrote[k] {
				msg += fmt.Sprintf(": %d increments lost, two holders were inside at once", wrote[k]-v)
			}
			r.add(S5, k, "%s", msg)
		}
	}
	if overran > 0 {
		r.note("%d critical sections ended after their holder's window (the test process stalled): assumption 2 of docs/safety.md did not hold for them", overran)
	}
}

// checkL1: a dead holder's lock is free again (held by at most n − q nodes)
// by max(death, last touch + node timeout) + TTL + 2 × allowance, as the
// probes show; and no lock key found by the final scan lacks a TTL or has
// one longer than the longest TTL any operation asked for.
func checkL1(s snapshot, cfg Config, r *Report) {
	for _, p := range s.probes {
		a := allowance(p.TTL, cfg)
		bound := max(p.Died, p.LastTouch+cfg.NodeTimeout) + p.TTL + 2*a
		var late []string
		for _, n := range p.Nodes {
			if !n.Reached || !n.Holds {
				continue
			}
			if n.PTTL < 0 {
				late = append(late, fmt.Sprintf("node%d (no TTL)", n.Node))
				continue
			}
			if expiry := n.At + time.Duration(n.PTTL-1)*time.Millisecond; expiry > bound {
				late = append(late, fmt.Sprintf("node%d (expires %v after the bound)", n.Node, expiry-bound))
			}
		}
		r.Checked[L1]++
		switch {
		case len(late) > cfg.Nodes-cfg.Quorum:
			r.add(L1, p.Key, "holder of token %s died at %v; the lock is not free by %v (TTL + drift after its last touch): %s", p.Token, p.Died, bound, strings.Join(late, ", "))
		case len(late) > 0:
			r.note("L1 %s: token %s of a dead holder outlives the bound on %s only (the lock is free)", p.Key, p.Token, strings.Join(late, ", "))
		}
	}
	if !s.scanned {
		if len(s.probes) == 0 {
			r.Skipped[L1] = "no holder died and no final scan (History.Scan)"
		}
		return
	}
	maxTTL := maxTTL(s.ops)
	limit := maxTTL + allowance(maxTTL, cfg)
	for _, l := range s.leftovers {
		r.Checked[L1]++
		if _, inc, sk, ok := node.ParseSession(l.Key, l.Token); ok {
			checkSessionLeftover(l, inc, sk, cfg, r, maxTTL, limit)
			continue
		}
		switch {
		case l.PTTL < 0:
			r.add(L1, l.Key, "node%d: lock key holds %q with no TTL: it would block the lock forever", l.Node, l.Token)
		case time.Duration(l.PTTL)*time.Millisecond > limit:
			r.add(L1, l.Key, "node%d: lock key holds %q with PTTL %dms, more than the longest TTL asked (%v)", l.Node, l.Token, l.PTTL, maxTTL)
		}
	}
}

// checkSessionLeftover is L1 for a session lock's key found by the final
// scan: it lives up to SessionKeyTTL, and keeps others out only while its
// session key sk holds its incarnation inc, which lives at most a TTL past
// its last renewal.
func checkSessionLeftover(l Leftover, inc, sk string, cfg Config, r *Report, maxTTL, limit time.Duration) {
	switch {
	case l.PTTL < 0:
		r.add(L1, l.Key, "node%d: session lock key holds %q with no TTL: it would never be collected", l.Node, l.Token)
	case time.Duration(l.PTTL)*time.Millisecond > cfg.SessionKeyTTL+allowance(cfg.SessionKeyTTL, cfg):
		r.add(L1, l.Key, "node%d: session lock key holds %q with PTTL %dms, more than a session lock key's TTL (%v)", l.Node, l.Token, l.PTTL, cfg.SessionKeyTTL)
	case l.SessionInc != inc:
		// free: its session has ended on this node
	case l.SessionPTTL < 0:
		r.add(L1, l.Key, "node%d: the session key %q the lock key names holds its incarnation %s with no TTL: the lock would be held forever", l.Node, sk, inc)
	case time.Duration(l.SessionPTTL)*time.Millisecond > limit:
		r.add(L1, l.Key, "node%d: the session key %q the lock key names holds its incarnation %s with PTTL %dms, more than the longest TTL asked (%v)", l.Node, sk, inc, l.SessionPTTL, maxTTL)
	}
}

// gone is what should have removed a token, and when that call returned;
// ttl is the TTL its key was set with, as far as the record tells: the
// failed acquire's, or the shortest that a released lock's acquire and
// extends asked for (its key then landed no earlier than that TTL less its
// PTTL ago: the checker never judges a key by a landing earlier than it
// could have been).
type gone struct {
	what   string
	client string
	end    time.Duration
	ttl    time.Duration
}

// nodeToken is one key of ours on one node: the Redis key and the token
// it holds (a lock of several keys leaves its token on each).
type nodeToken struct {
	node       int
	key, token string
}

// checkL2: no key found by the final scan holds the token of a round that
// did not win or of a lock that was released; and no key found by a sweep
// does, when the sweep came at least cfg.Cleanup after the call that should
// have removed it (the failed acquire call, the Release) returned. A late
// SET or PEXPIRE that lands after the clean-up gave up is what this finds.
func checkL2(s snapshot, cfg Config, r *Report) {
	if !s.scanned && s.sweeps == 0 {
		r.Skipped[L2] = "no final scan of the nodes and no sweep (History.Scan, History.AddSweep)"
		return
	}
	j := newL2Judge(s, cfg, r)
	r.Checked[L2] = len(j.tokens)
	for _, l := range s.leftovers {
		if lv, g, ok := j.lookup(l); ok && !j.landedBeyond(l, g) {
			j.reported[nodeToken{l.Node, l.Key, lv.Token}] = true
			r.add(L2, l.Key, "node%d still holds the token %q of %s (call returned at %v) after the run (PTTL %dms)", l.Node, lv.Token, g.what, us(g.end), l.PTTL)
		}
	}
	judgeSweeps(s, cfg, r, j.maxTTL, j.reported, j.lookup, j.landedBeyond)
	j.notes()
}

// l2Judge is checkL2's state: the tokens no node may keep, and what it has
// reported and noted so far.
type l2Judge struct {
	cfg      Config
	r        *Report
	maxTTL   time.Duration
	tokens   map[string]gone          // tokens of failed rounds and released locks
	crashed  map[string]time.Duration // client: when it crashed
	reported map[nodeToken]bool       // one violation per key, however often it is seen
	// beyond: landed after the library's horizon; free: a session lock's
	// key whose session had ended; afterCrash: a crashed client's key.
	beyond, free, afterCrash map[nodeToken]bool
}

func newL2Judge(s snapshot, cfg Config, r *Report) *l2Judge {
	j := &l2Judge{cfg: cfg, r: r, maxTTL: maxTTL(s.ops), tokens: goneTokens(s), crashed: map[string]time.Duration{},
		reported: map[nodeToken]bool{}, beyond: map[nodeToken]bool{}, free: map[nodeToken]bool{}, afterCrash: map[nodeToken]bool{}}
	for _, op := range s.ops {
		if op.Kind == Crash {
			j.crashed[op.Client] = op.End
		}
	}
	return j
}

// goneTokens are the tokens of the rounds that did not win and of the
// locks that were released, with the call that should have removed each.
func goneTokens(s snapshot) map[string]gone {
	won := resumedTokens(s.ops) // a resumed handle holds its token
	for _, op := range s.ops {
		if op.Kind == Acquire && op.Outcome == OK {
			won[op.Token] = true
			own, _ := node.SplitToken(op.Token) // as generated, before WithMetadata
			won[own] = true
		}
	}
	tokens := map[string]gone{}
	for _, op := range s.ops {
		for _, tok := range op.Tried {
			if !won[tok] {
				tokens[tok] = gone{fmt.Sprintf("a failed acquisition by %s", op.Client), op.Client, op.End, op.TTL}
			}
		}
	}
	for _, op := range s.ops {
		if op.Kind != Release || op.Token == "" {
			continue
		}
		if g, ok := tokens[op.Token]; !ok || op.End > g.end {
			tokens[op.Token] = gone{fmt.Sprintf("%s's released lock", op.Client), op.Client, op.End, 0}
		}
	}
	for _, op := range s.ops { // a released lock's shortest TTL
		g, ok := tokens[op.Token]
		if ok && (op.Kind == Acquire || op.Kind == Extend) && op.TTL > 0 && (g.ttl == 0 || op.TTL < g.ttl) {
			g.ttl = op.TTL
			tokens[op.Token] = g
		}
	}
	return tokens
}

// landedBeyond reports whether key l of g landed after the library's
// horizon for it: left to its own TTL by the leftover bound (case 3). A
// session lock's key that landed this late is held while its session
// lives, up to its own TTL, which L1 bounds.
func (j *l2Judge) landedBeyond(l Leftover, g gone) bool {
	lv, _, session, _ := sessionView(l, j.cfg, j.maxTTL)
	horizon := j.cfg.Horizon
	if !session && horizon > j.cfg.SessionKeyTTL {
		// A session run's horizon (RecheckBounds) is a session key's; the
		// library re-sends the release of any other key (a lock of
		// several keys, a shared holder) for its own TTL instead.
		ttl := g.ttl
		if ttl <= 0 {
			ttl = j.maxTTL
		}
		horizon += ttl - j.cfg.SessionKeyTTL
	}
	if horizon > 0 && landed(l, g, j.cfg, j.maxTTL) > g.end+horizon {
		j.beyond[nodeToken{l.Node, l.Key, lv.Token}] = true
		return true
	}
	return false
}

// landed is when key l of g landed, as its PTTL tells: its TTL (a session
// lock key's own, else g's, else the longest asked) less its PTTL before it
// was read.
func landed(l Leftover, g gone, cfg Config, maxTTL time.Duration) time.Duration {
	_, keyTTL, session, _ := sessionView(l, cfg, maxTTL)
	if !session && g.ttl > 0 {
		keyTTL = g.ttl
	}
	return l.At - keyTTL + time.Duration(l.PTTL)*time.Millisecond
}

// lookup returns the gone token key l holds, if any, and whether it is
// judged as a leftover: a session lock's key whose session has ended is
// free (it keeps no one out) and judged by L1 only; a key of a client that
// crashed before it was read is left to expire (its clean-up died with
// it), and must be free within TTL + 2 × allowance (+ a node timeout for
// what was in flight) after the crash.
func (j *l2Judge) lookup(l Leftover) (Leftover, gone, bool) {
	lv, _, _, isFree := sessionView(l, j.cfg, j.maxTTL)
	g, ok := j.tokens[lv.Token]
	if own, meta := node.SplitToken(lv.Token); !ok && meta != "" {
		// A failed attempt WithMetadata: the Recorder knows the token
		// as generated, the node holds it with the description.
		g, ok = j.tokens[own]
	}
	k := nodeToken{l.Node, l.Key, lv.Token}
	if ok && isFree {
		j.free[k] = true
		return lv, g, false
	}
	if died, dead := j.crashed[g.client]; ok && dead && died < l.At {
		j.afterCrash[k] = true
		if l.At > died+j.cfg.NodeTimeout+j.maxTTL+2*allowance(j.maxTTL, j.cfg) && !j.reported[k] {
			j.reported[k] = true
			j.r.add(L2, l.Key, "node%d still held the token %q of %s at %v, %v after its client crashed at %v", l.Node, lv.Token, g.what, us(l.At), us(l.At-died), us(died))
		}
		return lv, g, false
	}
	return lv, g, ok
}

// notes says what was found and, as documented, not judged.
func (j *l2Judge) notes() {
	if len(j.beyond) > 0 {
		j.r.note("L2: %d keys of ours landed later than the library's horizon (%v) after their call and were left to their TTL, as it states (a session lock's key: up to its own TTL, which L1 bounds)", len(j.beyond), j.cfg.Horizon)
	}
	if len(j.free) > 0 {
		j.r.note("L2: %d session lock keys of failed rounds or released locks were found after their session had ended there: free, left to their own TTL", len(j.free))
	}
	if len(j.afterCrash) > 0 {
		j.r.note("L2: %d keys of clients that had crashed were found: left to expire, judged against the crash + node timeout + TTL + 2 × allowance", len(j.afterCrash))
	}
}

// sessionView returns l as the checker judges it: for a session lock's key,
// its token (not its whole value), the TTL it was set with, and whether it
// is free (its session key no longer holds its incarnation); for any other
// key, l and the longest TTL.
func sessionView(l Leftover, cfg Config, maxTTL time.Duration) (lv Leftover, keyTTL time.Duration, session, free bool) {
	tok, inc, _, ok := node.ParseSession(l.Key, l.Token)
	if !ok {
		return l, maxTTL, false, false
	}
	l.Token = tok
	return l, cfg.SessionKeyTTL, true, l.SessionInc != inc
}

// judgeSweeps is checkL2's part for the keys found by sweeps during the run.
func judgeSweeps(s snapshot, cfg Config, r *Report, maxTTL time.Duration, reported map[nodeToken]bool, lookup func(Leftover) (Leftover, gone, bool), landedBeyond func(Leftover, gone) bool) {
	if s.sweeps == 0 {
		return
	}
	if cfg.Cleanup <= 0 {
		r.note("L2: %d sweeps during the run not judged: no clean-up bound (Config.Cleanup)", s.sweeps)
		return
	}
	// A key that landed in time (by its call's end + one node timeout)
	// is gone a TTL later: one found after that landed late, judged or not.
	landedLate := cfg.NodeTimeout + maxTTL + allowance(maxTTL, cfg)
	early, late := map[nodeToken]bool{}, map[nodeToken]bool{}
	for _, l := range s.swept {
		lv, g, ok := lookup(l)
		if !ok || landedBeyond(l, g) {
			continue
		}
		k := nodeToken{l.Node, l.Key, lv.Token}
		if l.At-g.end > landedLate {
			late[k] = true
		}
		if l.At < g.end+cfg.Cleanup || cfg.Horizon > 0 && l.At < landed(l, g, cfg, maxTTL)+cfg.Recheck {
			early[k] = true
			continue
		}
		if reported[k] {
			continue
		}
		reported[k] = true
		r.add(L2, l.Key, "node%d held the token %q of %s at %v, %v after the call returned at %v (clean-up bound %v; PTTL %dms)",
			l.Node, lv.Token, g.what, us(l.At), us(l.At-g.end), us(g.end), cfg.Cleanup, l.PTTL)
	}
	unjudged, unjudgedLate := 0, 0
	for k := range early {
		if !reported[k] {
			unjudged++
			if late[k] {
				unjudgedLate++
			}
		}
	}
	r.note("L2: %d sweeps during the run; %d keys of ours they found only within the clean-up bound (%v) of their call were not judged, %d of them seen more than node timeout + TTL after it (they landed late)",
		s.sweeps, unjudged, cfg.Cleanup, unjudgedLate)
}
