package integration

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/drift"
	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/redlock"
	hist "github.com/quorumlock/quorumlock/testkit/history"
)

// What the chaos runs read on the nodes behind the clients' backs: the
// probe of a dead holder's lock (L1), the sweeps after a late delivery and
// the scan at the end (L2), and the MONITOR audit (S3).

// cleanupBound is the bound docs/design.md states for the clean-up of a
// failed acquire call or a Release ("Deciding early, cleaning up late"): a
// node's reply may come up to one node timeout after the call returned; its
// background release gets min(TTL, max(10 × node timeout, 2 s)); when that
// release finds nothing, it is sent once more after min(node timeout,
// 100 ms), with the same time. After this, no key of the call may be left
// (L2 sweeps).
func cleanupBound(ttl, nodeTimeout time.Duration) time.Duration {
	bg := min(ttl, max(10*nodeTimeout, 2*time.Second))
	return nodeTimeout + bg + min(nodeTimeout, 100*time.Millisecond) + bg
}

// recheckBounds are the library's statement about late SETs of a token it
// no longer wants (docs/design.md, the leftover bound): it re-sends the
// release at least once a second for TTL + the background budget after the
// SET's fate became unknown, which is after the call returned (for session
// locks, 10 × TTL, their keys' own TTL, instead of TTL); a SET that lands
// within that horizon is gone a re-send (and its round trip) later.
func recheckBounds(ttl, nodeTimeout time.Duration, sessions bool) (horizon, recheck time.Duration) {
	bg := min(ttl, max(10*nodeTimeout, 2*time.Second))
	if sessions {
		return 10*ttl + bg, time.Second + 4*nodeTimeout
	}
	return ttl + bg, time.Second + 4*nodeTimeout
}

// probe reads the dead lock's key on every node, directly (L1). For a
// session lock, the node holds it while the key names its token and the
// session key holds the incarnation the key names, until the earlier of
// the two keys' expiries.
func probe(ctx context.Context, admins []*redis.Client, h *hist.History, l *redlock.Lock, ttl, died, lastTouch time.Duration) hist.Probe {
	p := hist.Probe{Key: l.Key(), Token: l.Token(), TTL: ttl, Died: died, LastTouch: lastTouch, Nodes: make([]hist.ProbeNode, len(admins))}
	var wg sync.WaitGroup
	for i, cl := range admins {
		wg.Go(func() {
			pn := hist.ProbeNode{Node: i, At: h.Now()}
			pctx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
			defer cancel()
			v, ms, err := getPTTL(pctx, cl, rkey(l.Key()))
			if err == nil {
				pn.Reached = true
				pn.Holds = v == l.Token()
				pn.PTTL = ms
				if tok, inc, sk, ok := node.ParseSession(rkey(l.Key()), v); ok && tok == l.Token() {
					sv, sms, err := getPTTL(pctx, cl, sk)
					pn.Reached = err == nil
					pn.Holds = sv == inc
					if sms >= 0 && (ms < 0 || sms < ms) {
						pn.PTTL = sms
					}
				}
			}
			p.Nodes[i] = pn
		})
	}
	wg.Wait()
	return p
}

// getPTTL reads key's value ("" when absent) and PTTL in one transaction.
func getPTTL(ctx context.Context, cl *redis.Client, key string) (string, int64, error) {
	vals, ms, err := getPTTLs(ctx, cl, []string{key})
	if err != nil {
		return "", 0, err
	}
	return vals[0], ms[0], nil
}

// getPTTLs reads the value ("" when absent) and PTTL of each key in one
// transaction, so that they agree.
func getPTTLs(ctx context.Context, cl *redis.Client, keys []string) (vals []string, pttls []int64, err error) {
	gets := make([]*redis.StringCmd, len(keys))
	ttls := make([]*redis.Cmd, len(keys))
	_, err = cl.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for j, k := range keys {
			gets[j] = p.Get(ctx, k)
			ttls[j] = p.Do(ctx, "PTTL", k)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, nil, err
	}
	vals, pttls = make([]string, len(keys)), make([]int64, len(keys))
	for j := range keys {
		vals[j] = gets[j].Val()
		pttls[j], _ = ttls[j].Int64()
	}
	return vals, pttls, nil
}

// addSessionState fills in, for each key found that holds a session lock's
// value, what its session key holds and its PTTL (read right after, in one
// transaction: a session key only moves on by renewals, which make a held
// lock look held a little longer, never the reverse).
func addSessionState(ctx context.Context, cl *redis.Client, found []hist.Leftover) error {
	idx, keys := []int{}, []string{}
	for j, l := range found {
		if _, _, sk, ok := node.ParseSession(l.Key, l.Token); ok {
			idx, keys = append(idx, j), append(keys, sk)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	vals, pttls, err := getPTTLs(ctx, cl, keys)
	if err != nil {
		return err
	}
	for j, i := range idx {
		found[i].SessionInc, found[i].SessionPTTL = vals[j], pttls[j]
	}
	return nil
}

// sweep reads our lock keys on nodes, directly, right after a late
// delivery and then every 200 ms until every key it can have set has
// expired (TTL + allowance), or the faulter stops (the final scan takes
// over), and records what it finds (L2).
func (f *faulter) sweep(nodes []int) {
	d := f.sweepFor
	if d == 0 {
		d = f.ttl + drift.Allowance(f.ttl, drift.DefaultFactor) + 100*time.Millisecond
	}
	until := time.Now().Add(d)
	for {
		for _, i := range nodes {
			if found, ok := readLockKeys(f.admins[i], f.h, i, f.keys); ok {
				f.h.AddSweep(found...)
			}
		}
		if time.Now().After(until) {
			return
		}
		select {
		case <-f.stop:
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// readLockKeys reads keys' lock keys on node i through cl (GET and PTTL in
// one transaction, so that they agree), stamped with the time of the read;
// ok is false when the node did not answer in time (killed or paused).
func readLockKeys(cl *redis.Client, h *hist.History, i int, keys []string) (found []hist.Leftover, ok bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	at := h.Now()
	rkeys := make([]string, len(keys))
	for j, k := range keys {
		rkeys[j] = rkey(k)
	}
	vals, pttls, err := getPTTLs(ctx, cl, rkeys)
	if err != nil {
		return nil, false
	}
	for j, k := range rkeys {
		if vals[j] != "" {
			found = append(found, hist.Leftover{Node: i, Key: k, Token: vals[j], PTTL: pttls[j], At: at})
		}
	}
	if addSessionState(ctx, cl, found) != nil {
		return nil, false
	}
	return found, true
}

// scanLeftovers records every lock key and session key (not the counters of
// fencing and of session incarnations) on every node (L1, L2); all nodes
// must be up.
func scanLeftovers(t *testing.T, admins []*redis.Client, h *hist.History) {
	t.Helper()
	for i, cl := range admins {
		var found []hist.Leftover
		for _, k := range lockKeys(t, cl) {
			if strings.HasSuffix(k, ":fence") || k == sessionSeq {
				continue // counters, without a TTL by design
			}
			found = append(found, hist.Leftover{Node: i, Key: k, Token: get(t, cl, k), PTTL: pttl(t, cl, k), At: h.Now()})
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := addSessionState(ctx, cl, found); err != nil {
			t.Errorf("node%d: reading session keys: %v", i, err)
		}
		cancel()
		h.AddLeftovers(found...)
	}
}

// startAudit follows every node's MONITOR stream; the returned function
// stops the monitors and reports their parse errors.
func startAudit(t *testing.T, c *cluster, allowExternal bool) (*hist.Audit, func()) {
	t.Helper()
	a := hist.NewAudit(hist.AuditConfig{Prefix: redlock.DefaultKeyPrefix, AllowExternal: allowExternal})
	var ms []*hist.Monitor
	for i := range c.Len() {
		ms = append(ms, hist.StartMonitor(i, c.Node(i).Addr(), c.password, a))
	}
	eventually(t, 10*time.Second, 5*time.Millisecond, "MONITOR attached on every node", func() bool {
		for _, m := range ms {
			if m.Attached() == 0 {
				return false
			}
		}
		return true
	})
	var once sync.Once
	stop := func() {
		once.Do(func() {
			for i, m := range ms {
				m.Stop()
				if n, err := m.Errors(); n > 0 {
					t.Errorf("node%d MONITOR: %d lines not parsed (last: %v)", i, n, err)
				}
			}
		})
	}
	t.Cleanup(stop)
	return a, stop
}
