package sim

import (
	"fmt"
	"time"

	"github.com/quorumlock/quorumlock/redlock"
)

// ST (a stalled Client recovers): in a stall schedule (calm, quick links,
// no fault but the stalls), a Client whose process stood still until E,
// and that then asks with Lock for its own key, which no other Client ever
// holds or asks for, has the lock by E + stBound. When the stall began the
// key was free, held by the Client (auto-extended or not; the Client
// releases it at E first, lost or not), or an acquire, a release or an
// extend of it was in flight. The bound:
//
//	stBound = retry max (250 ms) + 4 × node timeout
//
// and not the TTL: what the Client left on the nodes (a round that failed
// during the stall for want of its replies, a lock lost meanwhile, a
// release whose reply waited) does not have to expire. Every reply held
// during the stall is delivered when it ends, so the library knows at E of
// every key its yes left and removes it at once (a late yes is released
// when it arrives; a lock is released by its holder; a release never
// written is sent again), and on quick links that takes a round trip. What
// remains for the Lock call is to see the key free: its first attempt at E
// may still find the key held, or split the nodes' votes with those
// releases, and then its next attempt comes within the retry max (a
// waiter in the line polls that often; a release message may wake it
// sooner). 4 node timeouts cover the Release of the held lock at E, the
// roll-back of a split attempt and the winning round. The TTL would enter
// where a reply is lost (the key then expires, or its release is sent once
// its Pool's wait gives up, a follow budget later): faults the stall
// schedules do not play, and the defect TestFindsBugStallDrop puts back.
//
// A case is each such Lock call; stResult counts them, and those whose
// key still held a value on some node, and on a quorum, when the call
// began (the cases in which the library had something to clean up).
type stCase struct {
	client, key string
	stall       clientStall
	state       string        // the key's state as the stall began (stallState)
	start, end  time.Duration // the Lock call, since the schedule's start
	ok          bool          // it returned the lock
	err         string
	taken       int // nodes on which the key held a value at start
}

// stBound is ST's bound for s (see stCase).
func (s schedule) stBound() time.Duration { return redlock.DefaultRetryMax + 4*s.nodeTimeout }

// stProbes collects a schedule's cases; safe for concurrent use.
type stProbes struct{ collected[stCase] }

// stResult is what ST found in one schedule.
type stResult struct {
	checked int // cases judged
	// taken and quorum count the cases whose key held a value on at least
	// one node, and on a quorum, when the Lock call began.
	taken, quorum int
	// worst is the longest a case took from its stall's end to its lock,
	// and worstBound the bound it was judged against.
	worst, worstBound time.Duration
	violations        []string
}

// check judges the cases of s (see stCase).
func (p *stProbes) check(s schedule) stResult {
	cases := p.all()
	var r stResult
	bound := s.stBound()
	if s.work == stallWork && len(cases) != len(s.stalls) {
		r.violations = append(r.violations, fmt.Sprintf("ST: %d stalls and %d Lock calls after them: every stall of the stall workload must be followed by one", len(s.stalls), len(cases)))
	}
	for _, c := range cases {
		r.checked++
		if c.taken > 0 {
			r.taken++
		}
		if c.taken >= s.nodes/2+1 {
			r.quorum++
		}
		took := c.end - c.stall.end()
		if c.ok && took > r.worst {
			r.worst, r.worstBound = took, bound
		}
		if !c.ok || took > bound {
			got := "took it"
			if !c.ok {
				got = "failed: " + c.err
			}
			r.violations = append(r.violations, fmt.Sprintf("ST %s: %s's stall %v–%v ended with its own key %s; its Lock from %v %s at %v, %v after the stall's end, beyond the bound of %v (retry max %v + 4 × node timeout %v); %d of %d nodes held the key when it began",
				c.key, c.client, c.stall.at, c.stall.end(), c.state, c.start, got, c.end, took, bound, redlock.DefaultRetryMax, s.nodeTimeout, c.taken, s.nodes))
		}
	}
	return r
}

// add sums r into t.
func (t *stResult) add(r stResult) {
	t.checked += r.checked
	t.taken += r.taken
	t.quorum += r.quorum
	if r.worst > t.worst {
		t.worst, t.worstBound = r.worst, r.worstBound
	}
	t.violations = append(t.violations, r.violations...)
}
