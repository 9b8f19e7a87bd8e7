package redlock

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/quorumlock/quorumlock/internal/node"
)

// TestSessionLocksFireExtended: the Observer sees a session lock's
// automatic renewals as it sees a lock renewed key by key: an Extended
// event per renewal a quorum of nodes confirmed, each with a later
// deadline, and an ExtendFailed event per renewal that no quorum confirmed.
func TestSessionLocksFireExtended(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ps, c, rec := sessionEnv(t)
		ls := lockMany(t, c, 20)
		time.Sleep(10 * time.Second) // 3.3 TTLs: renewed every second
		per := map[string][]recorded{}
		for _, e := range rec.of("extended") {
			per[e.ev.Key] = append(per[e.ev.Key], e)
		}
		for _, l := range ls {
			evs := per[l.id.key]
			if len(evs) < 9 {
				t.Fatalf("%s: %d Extended events in 10s of renewals every second; want at least 9", l.id.key, len(evs))
			}
			for i := 1; i < len(evs); i++ {
				if !evs[i].ev.Deadline.After(evs[i-1].ev.Deadline) {
					t.Fatalf("%s: Extended event %d has deadline %v, not after the one before (%v)", l.id.key, i, evs[i].ev.Deadline, evs[i-1].ev.Deadline)
				}
			}
		}
		if n := len(rec.of("extend-failed")); n != 0 {
			t.Fatalf("%d ExtendFailed events while every node answered", n)
		}
		for _, p := range ps[:3] {
			p.set(node.RenewSession, 0, 1000, nil) // no reply
		}
		time.Sleep(2 * time.Second)
		if n := len(rec.of("extend-failed")); n < len(ls) {
			t.Fatalf("%d ExtendFailed events after a quorum of nodes stopped answering; want one per lock at least", n)
		}
	})
}
