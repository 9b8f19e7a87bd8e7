package integration

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/internal/scripts"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redlock"
	hist "github.com/quorumlock/quorumlock/testkit/history"
)

// The properties the chaos runs judge beside the history checker
// (testkit/history), for the lines of waiters and the shared holders
// (docs/design.md, "Hand-off" and "Shared holders"; the workloads are in
// chaos_lines_test.go):
//
//   - WF (writers first): a node never admits a new shared holder while a
//     waiter of Lock for the key alone is live in its line (wfJudge).
//   - LB (line bounds): the sorted sets beside a lock key stay within the
//     scripts' bounds on every node, whatever the key's history (lbSampler).
//   - ERR: no script answers with an error reply (scriptErrors).
//   - RES: Resume given a value read raw from a node (a shared key's mark,
//     a handed key's, a session lock's value) never returns a lock
//     (chaosRawResumes, in chaos_lines_test.go).

// The scripts' bounds (docs/design.md, "Bounds").
const (
	chaosLineMax   = scripts.LineMax   // members of each of <key>\x1fq, \x1fx and \x1fg
	chaosSharedMax = scripts.SharedMax // members of <key>\x1fr, the shared holders
)

// chaosLineTTL is how long a waiter's entry lives after the attempt that
// renewed it, as the chaos clients configure it: twice the longest retry
// delay plus the node timeout (redlock's lineTTL, docs/design.md,
// "Hand-off").
const chaosLineTTL = 2 * (chaosRetryMax + chaosNodeTimeout)

// wfMargin is taken off an entry's life (for the nodes' millisecond
// clocks and a wall clock that the monotonic one may drift from), and
// wfPad is added around each judged interval when looking for faults that
// touched it.
const (
	wfMargin = 50 * time.Millisecond
	wfPad    = time.Second
)

// ---- WF ----

// wfCallKey is the context key under which a flood client's acquire call
// carries its wfCall, which the nodes' commands carry on (node.Op.Values).
type wfCallKey struct{}

// wfCall is one acquire call of the flood key: a writer's (Lock for the
// key alone) or a reader's (a shared holder).
type wfCall struct {
	client string
	writer bool
	start  time.Duration // just before the call, on the History's clock
	end    time.Duration // just after it returned
	won    bool
}

// wfCmd is one command a flood client sent about the flood key: when Send
// was called (sent: it ran on the node no earlier) and when its result
// was delivered (got: it ran no later, if it ran at all), and the result.
type wfCmd struct {
	node      int
	kind      node.Kind
	waiter    string
	call      *wfCall
	sent, got time.Duration
	delivered bool
	res       node.Result
}

// taken reports whether c is an acquire that the node answered "taken":
// the script ran and put its waiter in the key's line.
func (c *wfCmd) taken() bool {
	return c.delivered && c.res.Err == nil && c.res.Int <= 0 && isExclusiveAcquire(c.kind)
}

func (c *wfCmd) refused() bool {
	return c.kind == node.AcquireShared && c.delivered && c.res.Err == nil && c.res.Int <= 0
}

func isExclusiveAcquire(k node.Kind) bool {
	return k == node.Acquire || k == node.AcquireFenced || k == node.AcquireSession
}

// wfJudge collects, through the flood clients' Pools (wrap), every command
// they send about the flood key, and judges WF at the end of the run.
type wfJudge struct {
	h    *hist.History
	rkey string // the flood key's Redis key

	mu    sync.Mutex
	cmds  []*wfCmd
	calls []*wfCall
}

func newWFJudge(h *hist.History, key string) *wfJudge {
	return &wfJudge{h: h, rkey: rkey(key)}
}

// begin starts a call of client's (a writer's or a reader's) and returns
// the context to make it with.
func (j *wfJudge) begin(ctx context.Context, client string, writer bool) (context.Context, *wfCall) {
	c := &wfCall{client: client, writer: writer, start: j.h.Now()}
	j.mu.Lock()
	j.calls = append(j.calls, c)
	j.mu.Unlock()
	return context.WithValue(ctx, wfCallKey{}, c), c
}

// finish records that c returned, with the lock or not.
func (j *wfJudge) finish(c *wfCall, won bool) {
	end := j.h.Now()
	j.mu.Lock()
	c.end, c.won = end, won
	j.mu.Unlock()
}

// wrap wraps node i's Pool of a flood client so that its commands about
// the flood key are recorded. p must queue commands (node.Sender), as the
// recording Pools do; a Subscriber stays one.
func (j *wfJudge) wrap(i int, p pool.Pool) (pool.Pool, error) {
	if _, ok := p.(node.Sender); !ok {
		return nil, fmt.Errorf("wfJudge: %T does not queue commands", p)
	}
	wp := &wfPool{Pool: p, j: j, node: i}
	if sub, ok := p.(node.Subscriber); ok {
		return wfSubscribedPool{wp, sub}, nil
	}
	return wp, nil
}

type wfPool struct {
	pool.Pool
	j    *wfJudge
	node int
}

// KeepsStallClock forwards node.StallClocked.
func (p *wfPool) KeepsStallClock() bool {
	s, ok := p.Pool.(node.StallClocked)
	return ok && s.KeepsStallClock()
}

type wfSubscribedPool struct {
	*wfPool
	node.Subscriber
}

var _ node.Sender = (*wfPool)(nil)

// Send records op when it is about the flood key and comes from an acquire
// call of the workload (op.Values carries its wfCall) or names a waiter
// (a leave, a release by a lock that waited), then passes it on.
func (p *wfPool) Send(op *node.Op, deadline time.Time, rcv node.Receiver, tag int) {
	s := p.Pool.(node.Sender)
	if op.Key != p.j.rkey {
		s.Send(op, deadline, rcv, tag)
		return
	}
	var call *wfCall
	if op.Values != nil {
		call, _ = op.Values.Value(wfCallKey{}).(*wfCall)
	}
	if call == nil && op.Waiter == "" {
		s.Send(op, deadline, rcv, tag)
		return
	}
	c := &wfCmd{node: p.node, kind: op.Kind, waiter: op.Waiter, call: call, sent: p.j.h.Now()}
	p.j.mu.Lock()
	p.j.cmds = append(p.j.cmds, c)
	p.j.mu.Unlock()
	s.Send(op, deadline, wfReceiver{j: p.j, c: c, rcv: rcv}, tag)
}

type wfReceiver struct {
	j   *wfJudge
	c   *wfCmd
	rcv node.Receiver
}

func (r wfReceiver) Deliver(tag int, res node.Result) {
	got := r.j.h.Now()
	r.j.mu.Lock()
	r.c.got, r.c.delivered, r.c.res = got, true, res
	r.j.mu.Unlock()
	r.rcv.Deliver(tag, res)
}

// wfReport is what WF found.
type wfReport struct {
	writers, joined      int // writer calls, and those that joined the line on a quorum
	judged               int // reader replies judged: in a writer's certain life in that node's line, no fault near
	refused              int // of them, refused (as they must be)
	violations           []string
	admittedViolations   int // violations whose reader call won: a shared holder admitted
	skippedFault         int // reader replies in a writer's certain life that a fault touched
	readerCalls, readers int // reader calls, and those that won
}

func (w *wfReport) String() string {
	return fmt.Sprintf("%d reader replies judged in the lines of %d writer waits (of %d writer calls; %d reader calls, %d admitted): %d refused, %d violations (%d of them in calls that were admitted); %d replies skipped for a fault near",
		w.judged, w.joined, w.writers, w.readerCalls, w.readers, w.refused, len(w.violations), w.admittedViolations, w.skippedFault)
}

// judge checks WF over everything recorded, against the faults.
//
// The rule. Take a writer W (a Lock call of the flood key alone) and a node
// n. Each of W's acquires that n answered "taken" put W in n's line: it ran
// between its send and its reply, so from the reply on until its send +
// chaosLineTTL (less wfMargin) W's entry on n is certainly live, unless
// another command of W's on n could have run in between: any command of W
// on n sent before the end of the interval whose result was not a
// delivered "taken" (a yes, which takes W out of the line; an error, a
// timeout, a command never answered; a leave, which W's call sends when it
// ends), and that may have run after the "taken" one (it was answered
// after that one was sent, or never). W joined on a quorum at J, the
// moment a third node's "taken" reached it. Then every shared acquire of a
// reader call that started after J, which n answered (yes or no), and ran
// (between its send and its reply) entirely inside one of W's certain
// intervals on n, is a case: n must refuse it. A yes is a violation. A
// case is skipped when a fault touched node n (kill, pause) or W's or the
// reader's link to n (partition, reset, latency, late delivery) within
// wfPad of the interval from W's "taken" command's send to the reader
// command's reply.
func (j *wfJudge) judge(faults []faultSpan) *wfReport {
	j.mu.Lock()
	defer j.mu.Unlock()
	rep := &wfReport{}
	byWaiter := map[string][]*wfCmd{} // a writer's commands, by its waiter name
	waiterCall := map[string]*wfCall{}
	var reads []*wfCmd
	for _, c := range j.cmds {
		switch {
		case c.call != nil && !c.call.writer:
			if c.kind == node.AcquireShared {
				reads = append(reads, c)
			}
		case c.waiter != "":
			byWaiter[c.waiter] = append(byWaiter[c.waiter], c)
			if c.call != nil && c.call.writer {
				waiterCall[c.waiter] = c.call
			}
		}
	}
	slices.SortFunc(reads, func(a, b *wfCmd) int { return cmp.Compare(a.sent, b.sent) })
	for _, c := range j.calls {
		if c.writer {
			rep.writers++
		} else {
			rep.readerCalls++
			if c.won {
				rep.readers++
			}
		}
	}
	for w, cmds := range byWaiter {
		call := waiterCall[w]
		if call == nil {
			continue // a waiter of another kind of call (none in the workload)
		}
		join, ok := joinedAt(cmds)
		if !ok {
			continue
		}
		rep.joined++
		// Only a reader command sent after the join and before the writer's
		// last certain entry lapsed can be a case.
		var last time.Duration
		for _, c := range cmds {
			if c.taken() {
				last = max(last, c.sent+chaosLineTTL)
			}
		}
		lo, _ := slices.BinarySearchFunc(reads, join, func(c *wfCmd, t time.Duration) int { return cmp.Compare(c.sent, t) })
		for _, r := range reads[lo:] {
			if r.sent > last {
				break
			}
			if r.call.start <= join || !r.delivered || r.res.Err != nil {
				continue
			}
			t, ok := certainlyIn(cmds, r.node, r.sent, r.got)
			if !ok {
				continue
			}
			if touched(faults, r.node, []string{call.client, r.call.client}, t.sent-wfPad, r.got+wfPad) {
				rep.skippedFault++
				continue
			}
			rep.judged++
			if r.refused() {
				rep.refused++
				continue
			}
			if r.call.won {
				rep.admittedViolations++
			}
			rep.violations = append(rep.violations, fmt.Sprintf(
				"node%d admitted a shared holder of %s (reader %s, call started at %v, command sent at %v, answered at %v; the call %s) while writer %s (waiter %s, joined on a quorum at %v) was in its line: answered \"taken\" there at %v to a command sent at %v (its entry lives until at least %v)",
				r.node, chaosFloodKey, r.call.client, us(r.call.start), us(r.sent), us(r.got), wonOrNot(r.call.won), call.client, w, us(join), us(t.got), us(t.sent), us(t.sent+chaosLineTTL)))
		}
	}
	return rep
}

func wonOrNot(won bool) string {
	if won {
		return "won: a shared holder was admitted"
	}
	return "did not win"
}

// joinedAt returns when a writer's "taken" answers came from a quorum of
// nodes: the reply of the third node's first.
func joinedAt(cmds []*wfCmd) (time.Duration, bool) {
	first := map[int]time.Duration{}
	for _, c := range cmds {
		if c.taken() {
			if t, ok := first[c.node]; !ok || c.got < t {
				first[c.node] = c.got
			}
		}
	}
	if len(first) < nodes/2+1 {
		return 0, false
	}
	ts := slices.Sorted(maps.Values(first))
	return ts[nodes/2], true
}

// certainlyIn returns a "taken" command of the writer (whose commands are
// cmds) that keeps it certainly in node n's line from before from until
// after to (see judge).
func certainlyIn(cmds []*wfCmd, n int, from, to time.Duration) (*wfCmd, bool) {
	for _, t := range cmds {
		if t.node != n || !t.taken() || t.got > from || to >= t.sent+chaosLineTTL-wfMargin {
			continue
		}
		clear := true
		for _, o := range cmds {
			if o.node != n || o == t || o.taken() {
				continue
			}
			// o may have run after t and before the reader's command.
			if o.sent <= to && (!o.delivered || o.got > t.sent) {
				clear = false
				break
			}
		}
		if clear {
			return t, true
		}
	}
	return nil, false
}

// touched reports whether a fault touched node n, or the link of one of
// clients to n, at any time within [from, to].
func touched(faults []faultSpan, n int, clients []string, from, to time.Duration) bool {
	for _, f := range faults {
		if f.end < from || f.start > to || !slices.Contains(f.nodes, n) {
			continue
		}
		if f.client == "" || slices.Contains(clients, f.client) {
			return true
		}
	}
	return false
}

func us(d time.Duration) string { return d.Round(time.Microsecond).String() }

// ---- LB ----

// lbSampler reads the size of every sorted set beside a lock key on every
// node (ZCARD of <key>\x1fq, \x1fx, \x1fg and \x1fr, found by SCAN) every
// half second, and judges LB: q, x and g never hold more than
// chaosLineMax members, r never more than chaosSharedMax. Nodes that do
// not answer in time (killed, paused) are skipped for that sample.
type lbSampler struct {
	admins []*redis.Client

	mu      sync.Mutex
	rounds  int                    // samples taken (of every node that answered)
	cases   int                    // sets read
	largest map[byte]int64         // the largest size read, by set (q, x, g, r)
	over    map[string]*lbOverflow // sets over their bound, by node and key
	errs    map[string]int         // failed reads, by error
}

type lbOverflow struct {
	node          int
	key           string
	first         time.Duration
	samples       int
	largest, over int64 // the largest size read; the bound
}

func newLBSampler(admins []*redis.Client) *lbSampler {
	return &lbSampler{admins: admins, largest: map[byte]int64{}, over: map[string]*lbOverflow{}, errs: map[string]int{}}
}

// run samples every half second until ctx ends.
func (s *lbSampler) run(ctx context.Context, h *hist.History) {
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		s.sample(300*time.Millisecond, h)
	}
}

// sample reads every node once, in parallel, each within timeout.
func (s *lbSampler) sample(timeout time.Duration, h *hist.History) {
	var wg sync.WaitGroup
	for i, cl := range s.admins {
		wg.Go(func() { s.sampleNode(i, cl, timeout, h.Now()) })
	}
	wg.Wait()
	s.mu.Lock()
	s.rounds++
	s.mu.Unlock()
}

func (s *lbSampler) sampleNode(i int, cl *redis.Client, timeout, at time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var keys []string
	iter := cl.Scan(ctx, 0, redlock.DefaultKeyPrefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		if n := len(k); n > 2 && k[n-2] == '\x1f' && strings.IndexByte("qxgr", k[n-1]) >= 0 {
			keys = append(keys, k)
		}
	}
	if err := iter.Err(); err != nil {
		s.failed(err)
		return
	}
	if len(keys) == 0 {
		return
	}
	cmds, err := cl.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, k := range keys {
			p.ZCard(ctx, k)
		}
		return nil
	})
	if err != nil && len(cmds) != len(keys) {
		s.failed(err)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for j, c := range cmds {
		n, err := c.(*redis.IntCmd).Result()
		if err != nil {
			s.errs[firstWord(err.Error())]++
			continue
		}
		k := keys[j]
		set := k[len(k)-1]
		s.cases++
		s.largest[set] = max(s.largest[set], n)
		bound := int64(chaosLineMax)
		if set == 'r' {
			bound = chaosSharedMax
		}
		if n <= bound {
			continue
		}
		id := fmt.Sprintf("%d %q", i, k)
		o := s.over[id]
		if o == nil {
			o = &lbOverflow{node: i, key: k, first: at, over: bound}
			s.over[id] = o
		}
		o.samples++
		o.largest = max(o.largest, n)
	}
}

func (s *lbSampler) failed(err error) {
	s.mu.Lock()
	s.errs[firstWord(err.Error())]++
	s.mu.Unlock()
}

// report returns the violations (one per set that went over its bound) and
// a summary.
func (s *lbSampler) report() (violations []string, summary string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := slices.Sorted(maps.Keys(s.over))
	for _, id := range ids {
		o := s.over[id]
		violations = append(violations, fmt.Sprintf("node%d: %q held %d members (bound %d) in %d samples from %v on",
			o.node, o.key, o.largest, o.over, o.samples, us(o.first)))
	}
	summary = fmt.Sprintf("%d sets read in %d samples of the nodes (largest: q %d, x %d, g %d, r %d; bounds %d and %d); failed reads: %s",
		s.cases, s.rounds, s.largest['q'], s.largest['x'], s.largest['g'], s.largest['r'], chaosLineMax, chaosSharedMax, formatOr(s.errs, "none"))
	return violations, summary
}

func formatOr(m map[string]int, none string) string {
	if len(m) == 0 {
		return none
	}
	return format(m)
}

func firstWord(s string) string {
	w, _, _ := strings.Cut(s, " ")
	return w
}

// ---- ERR ----

// scriptErrors is a go-redis hook (pool.WithHooks) on every Pool of the
// run's Clients that judges ERR: every script command (EVAL, EVALSHA)
// that the node answered is a case; an error reply is a violation, but for
// the replies that the faults and restarts explain and the library handles
// (transientReplies). Errors that are not replies (connections that broke,
// timeouts, a closed client) and redis.Nil are not replies of a script.
// Error replies to other commands are counted apart, not judged.
type scriptErrors struct {
	scripts   atomic.Int64
	mu        sync.Mutex
	transient map[string]int // by the reply's first word
	other     map[string]int // error replies to other commands, by command and first word
	bad       map[string]int // violations, by client, command and reply
	examples  []string       // the first violations in full
}

// transientReplies are the error replies the run's faults explain: a
// restarted node lost its script cache (NOSCRIPT: the Pool sends EVAL),
// loads its data (LOADING), or runs a long script (BUSY), and replies a
// replica or a failing-over master would give.
var transientReplies = []string{"NOSCRIPT", "LOADING", "BUSY", "MASTERDOWN", "TRYAGAIN", "READONLY"}

func newScriptErrors() *scriptErrors {
	return &scriptErrors{transient: map[string]int{}, other: map[string]int{}, bad: map[string]int{}}
}

// hook returns the hook of client's Pools.
func (e *scriptErrors) hook(client string) redis.Hook { return errHook{e: e, client: client} }

type errHook struct {
	e      *scriptErrors
	client string
}

func (h errHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h errHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.e.see(h.client, cmd)
		return err
	}
}

func (h errHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			h.e.see(h.client, c)
		}
		return err
	}
}

func (e *scriptErrors) see(client string, cmd redis.Cmder) {
	name := cmd.Name()
	script := strings.HasPrefix(name, "eval") || strings.HasPrefix(name, "fcall")
	err := cmd.Err()
	var rerr redis.Error
	reply := err != nil && !errors.Is(err, redis.Nil) && errors.As(err, &rerr)
	if script && (err == nil || errors.Is(err, redis.Nil) || reply) {
		e.scripts.Add(1)
	}
	if !reply {
		return
	}
	msg := err.Error()
	word := firstWord(msg)
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case slices.Contains(transientReplies, word):
		e.transient[word]++
	case !script:
		e.other[name+" "+word]++
	default:
		e.bad[client+" "+name+": "+msg]++
		if len(e.examples) < 10 {
			e.examples = append(e.examples, fmt.Sprintf("%s: %s %.120q: %s", client, name, fmt.Sprint(cmd.Args()), msg))
		}
	}
}

// report returns the violations (one per distinct client and reply, with
// its count) and a summary.
func (e *scriptErrors) report() (violations []string, n int, summary string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, k := range slices.Sorted(maps.Keys(e.bad)) {
		violations = append(violations, fmt.Sprintf("%d× %s", e.bad[k], k))
		n += e.bad[k]
	}
	summary = fmt.Sprintf("%d script replies; transient error replies (not judged): %s; error replies to other commands (not judged): %s",
		e.scripts.Load(), formatOr(e.transient, "none"), formatOr(e.other, "none"))
	if len(e.examples) > 0 {
		summary += "; first violations: " + strings.Join(e.examples, "; ")
	}
	return violations, n, summary
}
