// Package ident makes sure no two pools of a Client reach the same Redis
// server, which would count twice towards a quorum (docs/design.md, "One
// server, two names").
package ident

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorumlock/quorumlock/internal/health"
)

// Nodes makes sure no two pools reach the same Redis server: such a
// server would count twice towards a quorum. Each pool's server is asked for
// its run_id (INFO server) on first use, and a node counts towards quorums
// only once it has answered with a run_id no other node has.
//
// While fewer than a quorum of nodes are verified (at first use, or when
// nodes were down then), operations check the unverified nodes before they
// start, since they could not succeed without them; a first check lets the
// operation go on a node timeout after a quorum is verified (await). Otherwise unverified
// nodes are asked again in the background, at most once per recheck
// interval, and operations go on without them. At most one check runs at a
// time, and no lock is held during its I/O.
type Nodes struct {
	cfg Config

	allOK     atomic.Bool   // every node verified: the fast path
	verified  []atomic.Bool // per node
	nverified atomic.Int32
	dupErr    atomic.Pointer[error]

	mu      sync.Mutex
	ids     []string      // run_id per verified node ("" when the server reports none)
	errs    []error       // why a node is not verified yet
	running chan struct{} // while a check runs: closed when it ends
	last    time.Time     // when the last check ended
}

// Config is what Nodes needs of its Client.
type Config struct {
	Names  []string                                         // the nodes' names, by index
	RunID  func(ctx context.Context, i int) (string, error) // asks node i for its server's run_id
	Health *health.Log                                      // told of each answer and failure (nil: none)
	Logger *slog.Logger                                     // logs a server reached twice
	// Go runs f on a goroutine the Client joins when it closes.
	Go func(f func())
	// Bound bounds one check, as context.WithTimeout does (nil: it):
	// stall.WithTimeout, so that a check under way when the process stood
	// still goes on, for Pools that keep the stall clock.
	Bound func(context.Context, time.Duration) (context.Context, context.CancelFunc)
}

// Bounds are an operation's: its quorum, its node timeout and how often
// unverified nodes are asked again.
type Bounds struct {
	Quorum      int
	NodeTimeout time.Duration
	Recheck     time.Duration
}

// New returns the identities of cfg's nodes, none verified yet.
func New(cfg Config) *Nodes {
	v := &Nodes{cfg: cfg}
	n := len(cfg.Names)
	v.verified = make([]atomic.Bool, n)
	v.ids = make([]string, n)
	v.errs = make([]error, n)
	for i := range v.errs {
		v.errs[i] = errors.New("identity (INFO server run_id) not checked yet")
	}
	return v
}

// idTimeout bounds one identity check: longer than the node timeout, since
// the first use of a pool also dials and sets up its connections, and at
// least a second: an INFO is a connection's question, not a round's, and a
// check that times out closes its connections (go-redis closes one whose
// read timed out) and leaves the node out of votes until the next one. A
// process that has just stood still runs the backlog of everything that
// fell due meanwhile (every Client's rounds, renewals and checks at once):
// with 200 ms, the chaos suite's 2.7-3.7 s stalls left a new Client with
// no node verified for the 2.8 s after them in 1 run of 4 to 6
// (TestChaosSessions, ST and ST-conn). Only an operation that cannot
// succeed without the unverified nodes waits for a check.
func idTimeout(b Bounds) time.Duration {
	return max(4*b.NodeTimeout, time.Second)
}

// Dup returns the error that names two pools found to reach one server,
// or nil if none were.
func (v *Nodes) Dup() error {
	if p := v.dupErr.Load(); p != nil {
		return *p
	}
	return nil
}

// Check returns the duplicate-server error if one was found, after running
// or starting an identity check when one is needed (see the type's doc);
// a check started in the background runs on Config.Go. Safe for
// concurrent use.
func (v *Nodes) Check(ctx context.Context, b Bounds) error {
	if v.allOK.Load() {
		return nil
	}
	if err := v.Dup(); err != nil {
		return err
	}
	needed := int(v.nverified.Load()) < b.Quorum
	v.mu.Lock()
	if ch := v.running; ch != nil {
		v.mu.Unlock()
		if needed { // that check decides whether this operation can succeed
			select {
			case <-ch:
			case <-ctx.Done():
			}
		}
		return v.Dup()
	}
	if !needed && time.Since(v.last) < b.Recheck {
		v.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	v.running = ch
	// Every node is asked, the verified ones too: a server restarted since
	// it was verified has a new run_id, and a node verified now must be
	// compared with that one, not with the old.
	todo := make([]int, len(v.cfg.Names))
	for i := range todo {
		todo[i] = i
	}
	first := v.nverified.Load() == 0
	v.mu.Unlock()
	switch {
	case needed && first:
		// No node holds a run_id from an earlier check that a fresh
		// answer could contradict: nodes count as they answer, and the
		// operation need not wait for one that does not answer.
		reached := make(chan struct{})
		v.cfg.Go(func() { v.run(ctx, b, todo, ch, reached) })
		v.await(ctx, b, ch, reached)
	case needed:
		v.run(ctx, b, todo, ch, nil)
	default:
		v.cfg.Go(func() { v.run(context.Background(), b, todo, ch, nil) })
	}
	return v.Dup()
}

// await waits for a first check: until it ends (ch), ctx ends, or a node
// timeout after a quorum of nodes was verified (reached), as a round waits
// for the nodes beyond its quorum; the others are verified when they
// answer.
func (v *Nodes) await(ctx context.Context, b Bounds, ch, reached chan struct{}) {
	select {
	case <-ch:
		return
	case <-ctx.Done():
		return
	case <-reached:
	}
	t := time.NewTimer(b.NodeTimeout)
	defer t.Stop()
	select {
	case <-ch:
	case <-ctx.Done():
	case <-t.C:
	}
}

// run asks the nodes in todo for their run_id, in parallel, records the
// answers and closes ch.
func (v *Nodes) run(ctx context.Context, b Bounds, todo []int, ch, reached chan struct{}) {
	bound := v.cfg.Bound
	if bound == nil {
		bound = context.WithTimeout
	}
	ctx, cancel := bound(context.WithoutCancel(ctx), idTimeout(b))
	defer cancel()
	type answer struct {
		k   int
		id  string
		err error
	}
	answers := make(chan answer, len(todo))
	for k, i := range todo {
		go func() {
			id, err := v.cfg.RunID(ctx, i)
			answers <- answer{k, id, err}
		}()
	}
	ids := make([]string, len(todo))
	errs := make([]error, len(todo))
	stream := reached != nil
	for range todo {
		a := <-answers
		ids[a.k], errs[a.k] = a.id, a.err
		if i := todo[a.k]; a.err != nil {
			v.cfg.Health.Failed(i, a.err)
		} else {
			v.cfg.Health.Answered(i)
		}
		if stream { // a first check: each node counts as it answers
			v.mu.Lock()
			v.verifyLocked(todo[a.k], a.id, a.err)
			v.mu.Unlock()
			if reached != nil && int(v.nverified.Load()) >= b.Quorum {
				close(reached)
				reached = nil
			}
		}
	}
	v.end(ch, todo, ids, errs, stream)
}

// end ends a check: unless its answers were taken as they came (stream),
// it verifies the nodes asked (todo) by their answers (ids, errs); then it
// closes ch.
func (v *Nodes) end(ch chan struct{}, todo []int, ids []string, errs []error, stream bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	defer close(ch)
	v.running, v.last = nil, time.Now()
	if stream { // every answer was taken as it came
		return
	}
	for k, i := range todo { // fresh answers replace what verified nodes said before
		if errs[k] == nil && v.verified[i].Load() {
			v.ids[i] = ids[k]
		}
	}
	for k, i := range todo {
		v.verifyLocked(i, ids[k], errs[k])
	}
}

// verifyLocked verifies node i, unless it is verified already, by its
// answer to RunID: err, or its run_id id, which no verified node may
// share. v.mu must be held.
func (v *Nodes) verifyLocked(i int, id string, err error) {
	if v.verified[i].Load() {
		return
	}
	if err != nil {
		v.errs[i] = fmt.Errorf("%w (its identity, INFO server run_id, is not verified yet)", err) // the cause first
		return
	}
	if dup := v.sameAs(i, id); dup >= 0 { // never verified: it must not count twice
		a, b := min(dup, i), max(dup, i) // in the order given to New, whichever answered first
		err := fmt.Errorf("redlock: pools %q and %q reach the same Redis server (run_id %s): a server counted twice breaks the quorum; give the Client one pool per independent master", v.cfg.Names[a], v.cfg.Names[b], id)
		v.dupErr.CompareAndSwap(nil, &err)
		v.errs[i] = err
		v.cfg.Logger.Error("redlock: two pools reach one Redis server", "pool", v.cfg.Names[i], "same_as", v.cfg.Names[dup], "run_id", id)
		return
	}
	v.ids[i] = id
	v.verified[i].Store(true)
	if int(v.nverified.Add(1)) == len(v.cfg.Names) {
		v.allOK.Store(true)
	}
}

// sameAs returns a verified node other than i whose run_id is id, or -1.
// v.mu must be held.
func (v *Nodes) sameAs(i int, id string) int {
	for j := range v.ids {
		if j != i && id != "" && v.verified[j].Load() && v.ids[j] == id {
			return j
		}
	}
	return -1
}

// Verified reports whether node i is verified: it counts towards quorums.
func (v *Nodes) Verified(i int) bool { return v.verified[i].Load() }

// AllVerified reports whether every node is verified.
func (v *Nodes) AllVerified() bool { return v.allOK.Load() }

// Why returns why node i is not verified yet (nil once it is).
func (v *Nodes) Why(i int) error {
	if v.verified[i].Load() {
		return nil
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.errs[i]
}
