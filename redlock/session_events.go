package redlock

import (
	"fmt"
	"time"
)

// A session lock is renewed by its session's renewals, not by commands of
// its own; the Observer sees each background renewal of the session as an
// automatic renewal of each of its locks: Extended once a quorum of nodes
// confirmed it, ExtendFailed once every node it was sent to answered (or
// timed out) without a quorum.

// sessionCycle is one background renewal of a session: the commands sent
// at start, and the answers counted so far. Guarded by the session's mu.
type sessionCycle struct {
	start                     time.Time
	sent, answered, confirmed int
	told                      bool // its event was fired
}

// renewed counts one answer to cy (answered), a confirmation if confirmed,
// and fires the cycle's events once they are decided.
func (s *session) renewed(cy *sessionCycle, answered, confirmed bool) {
	q := s.cfg.quorumOf(len(s.nodes))
	s.mu.Lock()
	if answered {
		cy.answered++
	}
	if confirmed {
		cy.confirmed++
	}
	won := cy.confirmed >= q
	if cy.told || !won && cy.answered < cy.sent || s.watched == 0 {
		s.mu.Unlock()
		return
	}
	cy.told = true
	ls := make([]*Lock, 0, s.watched)
	for l := range s.locks {
		if l.cfg.observer != nil {
			ls = append(ls, l)
		}
	}
	confirmedBy, sent := cy.confirmed, cy.sent
	s.mu.Unlock()
	took := s.cfg.now().Sub(cy.start)
	for _, l := range ls {
		if won {
			l.cfg.observer.Extended(l.event(took, nil))
			continue
		}
		err := fmt.Errorf("redlock: renewal session of %q: %d of %d nodes confirmed its renewal, %d needed: %w", l.id.key, confirmedBy, sent, q, ErrNotHeld)
		l.cfg.observer.ExtendFailed(l.event(took, err))
	}
}
