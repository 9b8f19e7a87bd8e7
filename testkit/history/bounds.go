package history

import (
	"github.com/quorumlock/quorumlock/internal/node"

	"strings"
	"time"
)

// CleanupBound is the bound docs/design.md states for the clean-up of a
// failed acquire call or a Release of a Client with the given TTL and node
// timeout ("Deciding early, cleaning up late"): a node's reply may come up
// to one node timeout after the call returned; its background release gets
// min(TTL, max(10 × node timeout, 2 s)); when that release finds nothing,
// it is sent once more after min(node timeout, 100 ms), with the same
// time. After this, no key of the call may be left: give it to
// Config.Cleanup.
func CleanupBound(ttl, nodeTimeout time.Duration) time.Duration {
	bg := background(ttl, nodeTimeout)
	return nodeTimeout + bg + min(nodeTimeout, 100*time.Millisecond) + bg
}

// RecheckBounds are the library's statement about late SETs of a token it
// no longer wants (docs/design.md, the leftover bound), for Config.Horizon
// and Config.Recheck: it re-sends the release at least once a second for
// TTL + the background budget after the SET's fate became unknown, which is
// after the call returned (for session locks, 10 × TTL, their keys' own
// TTL, instead of TTL); a SET that lands within that horizon is gone a
// re-send (and its round trip) later.
func RecheckBounds(ttl, nodeTimeout time.Duration, sessions bool) (horizon, recheck time.Duration) {
	bg := background(ttl, nodeTimeout)
	if sessions {
		return 10*ttl + bg, time.Second + 4*nodeTimeout
	}
	return ttl + bg, time.Second + 4*nodeTimeout
}

// background is the time a background release is given.
func background(ttl, nodeTimeout time.Duration) time.Duration {
	return min(ttl, max(10*nodeTimeout, 2*time.Second))
}

// LockKey reports whether k, a Redis key under prefix, is a lock key: not
// a fencing counter, the session sequence or a line of waiters, which share
// the prefix. The end-of-run scan reads only lock keys.
func LockKey(prefix, k string) bool {
	counter := strings.HasSuffix(k, ":fence") || k == prefix+"s:seq"
	line := strings.HasSuffix(k, node.LineSuffix) || strings.HasSuffix(k, node.LapseSuffix) || strings.HasSuffix(k, node.LeftSuffix)
	return strings.HasPrefix(k, prefix) && !counter && !line
}
