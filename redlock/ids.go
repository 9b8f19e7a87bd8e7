package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// identities makes sure no two pools reach the same Redis server: such a
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
type identities struct {
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

func (v *identities) init(n int) {
	v.verified = make([]atomic.Bool, n)
	v.ids = make([]string, n)
	v.errs = make([]error, n)
	for i := range v.errs {
		v.errs[i] = errors.New("identity (INFO server run_id) not checked yet")
	}
}

// idTimeout bounds one identity check: longer than the node timeout, since
// the first use of a pool also dials and sets up its connections.
func idTimeout(cfg *config) time.Duration {
	return max(4*cfg.nodeTimeout, 200*time.Millisecond)
}

func (v *identities) dup() error {
	if p := v.dupErr.Load(); p != nil {
		return *p
	}
	return nil
}

// check returns the duplicate-server error if one was found, after running
// or starting an identity check when one is needed (see the type's doc).
// The caller must hold an enter() count on c.
func (v *identities) check(ctx context.Context, c *Client, cfg *config) error {
	if v.allOK.Load() {
		return nil
	}
	if err := v.dup(); err != nil {
		return err
	}
	needed := int(v.nverified.Load()) < cfg.quorumOf(len(c.pools))
	v.mu.Lock()
	if ch := v.running; ch != nil {
		v.mu.Unlock()
		if needed { // that check decides whether this operation can succeed
			select {
			case <-ch:
			case <-ctx.Done():
			}
		}
		return v.dup()
	}
	if !needed && time.Since(v.last) < cfg.recheck {
		v.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	v.running = ch
	// Every node is asked, the verified ones too: a server restarted since
	// it was verified has a new run_id, and a node verified now must be
	// compared with that one, not with the old.
	todo := make([]int, len(c.pools))
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
		c.wg.Go(func() { v.run(ctx, c, cfg, todo, ch, reached) })
		v.await(ctx, cfg, ch, reached)
	case needed:
		v.run(ctx, c, cfg, todo, ch, nil)
	default:
		c.wg.Go(func() { v.run(context.Background(), c, cfg, todo, ch, nil) })
	}
	return v.dup()
}

// await waits for a first check: until it ends (ch), ctx ends, or a node
// timeout after a quorum of nodes was verified (reached), as a round waits
// for the nodes beyond its quorum; the others are verified when they
// answer.
func (v *identities) await(ctx context.Context, cfg *config, ch, reached chan struct{}) {
	select {
	case <-ch:
		return
	case <-ctx.Done():
		return
	case <-reached:
	}
	t := time.NewTimer(cfg.nodeTimeout)
	defer t.Stop()
	select {
	case <-ch:
	case <-ctx.Done():
	case <-t.C:
	}
}

// run asks the nodes in todo for their run_id, in parallel, records the
// answers and closes ch.
func (v *identities) run(ctx context.Context, c *Client, cfg *config, todo []int, ch, reached chan struct{}) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), idTimeout(cfg))
	defer cancel()
	type answer struct {
		k   int
		id  string
		err error
	}
	answers := make(chan answer, len(todo))
	for k, i := range todo {
		go func() {
			id, err := c.pools[i].RunID(ctx)
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
			c.health.Failed(i, a.err)
		} else {
			c.health.Answered(i)
		}
		if stream { // a first check: each node counts as it answers
			v.mu.Lock()
			v.verifyLocked(c, cfg, todo[a.k], a.id, a.err)
			v.mu.Unlock()
			if reached != nil && int(v.nverified.Load()) >= cfg.quorumOf(len(c.pools)) {
				close(reached)
				reached = nil
			}
		}
	}

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
		v.verifyLocked(c, cfg, i, ids[k], errs[k])
	}
}

// verifyLocked verifies node i, unless it is verified already, by its
// answer to RunID: err, or its run_id id, which no verified node may
// share. v.mu must be held.
func (v *identities) verifyLocked(c *Client, cfg *config, i int, id string, err error) {
	if v.verified[i].Load() {
		return
	}
	if err != nil {
		v.errs[i] = fmt.Errorf("%w (its identity, INFO server run_id, is not verified yet)", err) // the cause first
		return
	}
	if dup := v.sameAs(i, id); dup >= 0 { // never verified: it must not count twice
		a, b := min(dup, i), max(dup, i) // in the order given to New, whichever answered first
		err := fmt.Errorf("redlock: pools %q and %q reach the same Redis server (run_id %s): a server counted twice breaks the quorum; give the Client one pool per independent master", c.pools[a].Name(), c.pools[b].Name(), id)
		v.dupErr.CompareAndSwap(nil, &err)
		v.errs[i] = err
		cfg.logger.Error("redlock: two pools reach one Redis server", "pool", c.pools[i].Name(), "same_as", c.pools[dup].Name(), "run_id", id)
		return
	}
	v.ids[i] = id
	v.verified[i].Store(true)
	if int(v.nverified.Add(1)) == len(c.pools) {
		v.allOK.Store(true)
	}
}

// sameAs returns a verified node other than i whose run_id is id, or -1.
// v.mu must be held.
func (v *identities) sameAs(i int, id string) int {
	for j := range v.ids {
		if j != i && id != "" && v.verified[j].Load() && v.ids[j] == id {
			return j
		}
	}
	return -1
}

// ask returns the function that tells a round which nodes to ask (nil: all),
// marking the others in res as not asked.
func (v *identities) ask(res []NodeResult) func(int) bool {
	if v.allOK.Load() {
		return nil
	}
	return func(i int) bool {
		if v.verified[i].Load() {
			return true
		}
		v.mu.Lock()
		err := v.errs[i]
		v.mu.Unlock()
		res[i].Outcome, res[i].Err = OutcomeNotAsked, err
		return false
	}
}
