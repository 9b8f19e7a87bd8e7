package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"

	"github.com/quorumlock/quorumlock/redlock"
	hist "github.com/quorumlock/quorumlock/testkit/history"
)

// The chaos runs' semaphores and election: the workers take permits of
// three semaphores (of 1, 2 and 5 permits) and campaign for one election,
// and observer clients follow its leaders (Observe) and read them
// (Leader). The checker judges each permit's key as a lock and each
// semaphore as a whole (SEM), the leaders as a fenced key (S1, S4) and
// what the observers read (ELE).

// chaosSems are the semaphores, by name, with their numbers of permits;
// chaosElection is the election's name.
var chaosSems = []struct {
	name    string
	permits int
}{{"chaos-sem1", 1}, {"chaos-sem2", 2}, {"chaos-sem5", 5}}

const (
	chaosElection  = "chaos-leader"
	chaosObservers = 2
)

// permitKeys are the keys the checker judges the permits by (their
// counters guard the permits' critical sections).
func permitKeys() []string {
	var keys []string
	for _, s := range chaosSems {
		for i := range s.permits {
			keys = append(keys, hist.PermitKey(s.name, i))
		}
	}
	return keys
}

// chaosRKey is the Redis key of k, a lock's key or a permit's (PermitKey).
func chaosRKey(k string) string {
	if name, i, ok := strings.Cut(k, "\x1fp"); ok {
		return rkey(name) + "\x1fp" + i
	}
	return rkey(k)
}

// primitives counts what the workers did with the semaphores and the
// election, and what the observers read.
type primitives struct {
	permitCalls, permitsHeld atomic.Int64
	campaigns, leaders       atomic.Int64
	observed, leaderReads    atomic.Int64
	seq                      atomic.Int64 // the campaigns' values
}

// semaphores makes the client's Semaphores (unfenced: permits have no
// fence; a session client's are auto-extended, as its locks are).
func (cc *chaosClient) semaphores() error {
	cc.sems = map[string]*redlock.Semaphore{}
	for _, s := range chaosSems {
		sem, err := cc.Client.Semaphore(s.name, s.permits, redlock.WithFencing(false), redlock.WithMaxWait(600*time.Millisecond))
		if err != nil {
			return fmt.Errorf("%s: semaphore %s: %w", cc.name, s.name, err)
		}
		cc.sems[s.name] = sem
	}
	return nil
}

// permit takes a permit of a random semaphore (the one of 5 permits half
// the time, so that it fills up), with TryAcquire or (2 in 3) Acquire
// (for up to 600 ms); a session client's, auto-extended, is watched like
// its locks.
func (r *chaosRun) permit(ctx context.Context, cc *chaosClient, rng *rand.Rand) (*redlock.Lock, hist.Op, error) {
	s := chaosSems[2]
	if rng.IntN(2) == 0 {
		s = chaosSems[rng.IntN(2)]
	}
	l, op, err := cc.rec.Permit(ctx, cc.sems[s.name], rng.IntN(3) > 0)
	r.prims.permitCalls.Add(1)
	if err == nil {
		r.prims.permitsHeld.Add(1)
		if cc.session {
			cc.watch(l)
		}
	}
	return l, op, err
}

// campaign runs for the election for up to 200–1000 ms with a value of
// its own; a leader's deadline is watched (it is auto-extended), and it
// reads the leader once (its own value and term, by Leader's contract).
func (r *chaosRun) campaign(ctx context.Context, cc *chaosClient, rng *rand.Rand) (*redlock.Lock, hist.Op, error) {
	value := fmt.Sprintf("%s#%d", cc.name, r.prims.seq.Add(1))
	wait := time.Duration(200+rng.IntN(800)) * time.Millisecond
	l, op, err := cc.rec.Campaign(ctx, chaosElection, value, redlock.WithMaxWait(wait))
	r.prims.campaigns.Add(1)
	if err != nil {
		return nil, op, err
	}
	r.prims.leaders.Add(1)
	cc.watch(l)
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if _, _, err := cc.rec.Leader(rctx, chaosElection); err == nil {
		r.prims.leaderReads.Add(1)
	}
	return l, op, err
}

// observe follows the election's leaders on cc until ctx ends: Observe
// for 2–8 s at a time, a Leader read in between.
func (r *chaosRun) observe(ctx context.Context, cc *chaosClient, k int) {
	rng := rand.New(rand.NewPCG(uint64(k), 7))
	for ctx.Err() == nil {
		octx, cancel := context.WithTimeout(ctx, time.Duration(2000+rng.IntN(6000))*time.Millisecond)
		for range cc.rec.Observe(octx, chaosElection) {
			r.prims.observed.Add(1)
		}
		cancel()
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		if _, _, err := cc.rec.Leader(rctx, chaosElection); err == nil {
			r.prims.leaderReads.Add(1)
		}
		cancel()
	}
}
