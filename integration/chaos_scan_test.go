package integration

import (
	"context"
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

// probe reads key, a key of the dead lock l, on every node, directly (L1).
// For a session lock, the node holds it while the key names its token and
// the session key holds the incarnation the key names, until the earlier
// of the two keys' expiries.
func probe(ctx context.Context, admins []*redis.Client, h *hist.History, l *redlock.Lock, key string, ttl, died, lastTouch time.Duration) hist.Probe {
	p := hist.Probe{Key: key, Token: l.Token(), TTL: ttl, Died: died, LastTouch: lastTouch, Nodes: make([]hist.ProbeNode, len(admins))}
	var wg sync.WaitGroup
	for i, cl := range admins {
		wg.Go(func() {
			pn := hist.ProbeNode{Node: i, At: h.Now()}
			pctx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
			defer cancel()
			v, ms, err := getPTTL(pctx, cl, rkey(key))
			if err == nil {
				pn.Reached = true
				pn.Holds = v == l.Token()
				pn.PTTL = ms
				if tok, inc, sk, ok := node.ParseSession(rkey(key), v); ok && tok == l.Token() {
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
	vals, ms, err := hist.GetPTTLs(ctx, cl, []string{key})
	if err != nil {
		return "", 0, err
	}
	return vals[0], ms[0], nil
}

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
	rkeys := make([]string, len(keys))
	for j, k := range keys {
		rkeys[j] = chaosRKey(k)
	}
	found, err := hist.ReadLeftovers(ctx, cl, i, rkeys, h.Now())
	return found, err == nil
}

// scanLeftovers records every lock key and session key (not the counters of
// fencing and of session incarnations) on every node (L1, L2); all nodes
// must be up.
func scanLeftovers(t *testing.T, admins []*redis.Client, h *hist.History) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.Scan(ctx, admins, ""); err != nil {
		t.Error(err)
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
