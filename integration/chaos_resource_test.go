package integration

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/fence"
	"github.com/quorumlock/quorumlock/redlock"
	hist "github.com/quorumlock/quorumlock/testkit/history"
)

// resource is the state the locks protect, on a Redis server of its own that
// no fault touches: per key, a counter read and written in two steps (S5)
// and a fenced register written with fence.Write.
type resource struct {
	cl *redis.Client
	h  *hist.History
}

func counterKey(key string) string  { return "chaos:counter:" + key }
func registerKey(key string) string { return "chaos:register:" + key }

// The margins of a critical section.
const (
	startMargin = 500 * time.Millisecond // validity needed to start
	writeMargin = 250 * time.Millisecond // validity needed to write: a stall shorter than this cannot push the write past the deadline
)

// section runs one critical section under l for cc: for each key of l (a
// lock of several keys guards each), read its counter, work briefly, and,
// if the deadline is not near, write it back incremented and write the
// key's fenced register (a shared holder only reads the counter). It records a section per key and returns false if
// it found too little validity left to start.
func (res *resource) section(ctx context.Context, cc *chaosClient, l *redlock.Lock, rng *rand.Rand) bool {
	keys := l.Keys()
	if l.Permit() >= 0 {
		key, _, _ := cc.rec.KeyOf(l) // a permit's section guards its permit's counter
		keys = []string{key}
	}
	for i, key := range keys {
		if time.Until(cc.deadline(l)) < startMargin {
			return i > 0
		}
		var all []string
		if len(keys) > 1 {
			all = keys
		}
		res.sectionOf(ctx, cc, l, key, all, rng)
	}
	return true
}

// sectionOf is the section of key under l (all: l's keys when it has
// several).
func (res *resource) sectionOf(ctx context.Context, cc *chaosClient, l *redlock.Lock, key string, all []string, rng *rand.Rand) {
	s := hist.Section{Client: cc.name, Key: key, Keys: all, Shared: l.Shared(), Token: l.Token(), Fence: l.Fence(), Start: res.h.Now()}
	_, s.Semaphore, s.Permits = cc.rec.KeyOf(l)
	defer func() {
		s.End = res.h.Now()
		res.h.AddSection(s)
	}()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	v, err := res.cl.Get(rctx, counterKey(key)).Int64()
	if errors.Is(err, redis.Nil) {
		v, err = 0, nil
	}
	if err != nil {
		s.Err = "read: " + err.Error()
		return
	}
	s.Read, s.Counted = v, true
	work := time.Duration(rng.IntN(2000)) * time.Microsecond
	if s.Semaphore != "" {
		work *= 25 // a permit's holders stay longer, so that the semaphores fill up
	}
	time.Sleep(work) // the work
	if l.Shared() {
		return // a shared holder only reads: an exclusive holder's write inside its section breaks LIN, their overlap SEC
	}
	// Read again: a session lock's deadline moves with its session, later
	// or, when a node drops out, earlier.
	if time.Until(cc.deadline(l)) < writeMargin {
		return // too late to write: stop, as a careful holder does
	}
	if err := res.cl.Set(rctx, counterKey(key), v+1, 0).Err(); err != nil {
		s.Err, s.Unsure = "write: "+err.Error(), true
		return
	}
	s.Wrote = true
	if l.Fence() == 0 {
		return // no fencing token: nothing to write to the fenced register
	}
	s.Fenced, s.Err = fencedWrite(rctx, res.cl, key, l.Fence(), fmt.Sprint(v+1))
}

// fencedWrite writes v to key's fenced register with fencing token f and
// says what the register did with it; errMsg describes any other error.
func fencedWrite(ctx context.Context, cl *redis.Client, key string, f uint64, v string) (_ hist.FenceResult, errMsg string) {
	switch err := fence.Write(ctx, cl, registerKey(key), f, v); {
	case err == nil:
		return hist.Accepted, ""
	case errors.Is(err, fence.ErrStale):
		return hist.Refused, ""
	default:
		return hist.NotWritten, "fenced write: " + err.Error()
	}
}

// readCounters records the final value of each key's counter (S5).
func (res *resource) readCounters(t *testing.T, keys []string) {
	t.Helper()
	for _, key := range keys {
		v, err := res.cl.Get(context.Background(), counterKey(key)).Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatalf("reading counter %s: %v", key, err)
		}
		res.h.SetCounter(key, v)
	}
}
