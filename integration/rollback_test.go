package integration

import (
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/redlock"
)

// TestRollbackOnSlowNodes checks L2 when three of five nodes are reachable
// but slower than the per-node timeout (150 ms each way behind a proxy, node
// timeout 100 ms): the acquisition fails within the bound with those nodes
// timing out, but the SET it sent them still lands. After Client.Close,
// which joins the roll-back and late-reply clean-up, none of the slow nodes
// may keep the failed attempt's token.
func TestRollbackOnSlowNodes(t *testing.T) {
	const (
		ttl         = 5 * time.Second
		nodeTimeout = 100 * time.Millisecond
		latency     = 150 * time.Millisecond // each way
	)
	c := startCluster(t, ttl, "")
	ctx := ctxT(t, 30*time.Second)
	// Connections open, identities verified, drainers ready before the
	// latency.
	lc, proxies, drainers := c.proxied(t, ctx, "slow", redlock.WithTTL(ttl), redlock.WithNodeTimeout(nodeTimeout))

	slow := []int{0, 1, 2}
	for _, i := range slow {
		proxies[i].SetLatency(latency)
	}
	took := failingAttempts(t, ctx, lc, 1, "slow", failBound(t, nodeTimeout), slow, redlock.OutcomeTimeout)
	t.Logf("TryLock with 3 of 5 nodes slower than the node timeout failed in %s", durations(took))
	if err := lc.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	// Wait until everything the client sent through the slow proxies has
	// reached the servers (see drain).
	drain(t, drainers, 10*time.Second)
	lc.closeAndCheck(t)
	if t.Failed() {
		t.Logf("the slow nodes are reachable, only %v slower each way; the roll-back of the failed round is bounded by the %v per-node timeout, "+
			"shorter than one round trip to them, and go-redis abandoned the SET at that timeout, so no late reply ever arrived to trigger a release: "+
			"the key stays until its TTL", latency, nodeTimeout)
	}
	for _, i := range slow {
		proxies[i].SetLatency(0)
	}
}
