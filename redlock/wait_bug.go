package redlock

import "time"

// splitOnce is splitDelay before it doubled (quorumlock_bug_splitonce): one
// quick retry per retry max, else the waiter's polling.
func (s *sleeper) splitOnce() time.Duration {
	if time.Since(s.quick) < s.cfg.RetryMax {
		return 0
	}
	s.quick = time.Now()
	return s.cfg.HandGrace()
}
