package conf

import "time"

// Durations derived from the settings, each with why it is what it is.

// LineTTL is how long a waiter's entry lives after its last attempt: the
// longest wait between two attempts of Lock (the retry delay, plus an
// attempt bounded by the node timeout), twice. A waiter that stops asking
// (its process died) leaves the line within it.
func (c *Config) LineTTL() time.Duration {
	return 2 * (c.RetryMax + c.NodeTimeout)
}

// StayOut is how long a waiter that left the line for good (its Lock call
// ended) stays out of it on the nodes, and how long its leave is sent
// again while it fails: its attempts are followed, and may land, up to the
// cleanup budget after they were sent, longer than LineTTL with the
// defaults (2 s against 0.6 s); one that lands later puts it back, for
// LineTTL at most.
func (c *Config) StayOut() time.Duration { return max(c.LineTTL(), c.CleanupTimeout()) }

// HandGrace is how long a key handed to a waiter stays free for it alone:
// the time for the release's message to reach it and its round to run, at
// most the node timeout and the first retry delay. A waiter that does not
// come in time (its process died, a node kept it in its line after it
// left) costs the key that much; one that comes later still finds the key
// free, unless a newcomer took it: the other waiters in the line poll
// slowly.
func (c *Config) HandGrace() time.Duration {
	return min(c.NodeTimeout, c.RetryBase)
}

// Follow is how long a command is followed after its round stopped
// waiting: with the node timeout, as long as a release nobody waits for may
// take (CleanupTimeout), which is what Close waits for at most.
func (c *Config) Follow() time.Duration { return max(0, c.CleanupTimeout()-c.NodeTimeout) }

// RecheckDelay is the first wait before a release is sent again: a command
// still in flight when its call failed arrives within one more one-way
// latency of the link, below the node timeout on any link the lock can work
// over; 100 ms at most.
func (c *Config) RecheckDelay() time.Duration {
	return min(c.NodeTimeout, 100*time.Millisecond)
}

// CleanupTimeout bounds a release nobody waits for, and how long a command
// is followed after its round stopped waiting: longer than the node timeout,
// because the node it goes to was slow or failing, so that a node that is
// merely slow still gets it (a new connection may need connect, HELLO, the
// restart guard's INFO, EVALSHA and perhaps EVAL); never longer than the
// TTL. Close waits for these releases.
func (c *Config) CleanupTimeout() time.Duration {
	return min(c.TTL, max(10*c.NodeTimeout, 2*time.Second))
}

// KeyTTL is the TTL of a session lock's key: long, so that refreshing it
// costs little, yet bounded, so that the keys of a session that ended are
// collected.
func (c *Config) KeyTTL() time.Duration { return 10 * c.TTL }

// FirstRenewal is when a lock acquired at now, valid until deadline, is
// first renewed: at a random point in the second half of its renewal
// interval (a session lock's key: of half its key TTL), so that locks
// acquired together do not all come due together; never later than
// RenewalWait allows.
func (c *Config) FirstRenewal(now, deadline time.Time, session bool) time.Time {
	if session { // its key's refresh, every half key TTL
		iv := c.KeyTTL() / 2
		return now.Add(iv/2 + c.Rnd.Duration(iv/2+1))
	}
	iv := c.RenewInterval()
	return now.Add(min(iv/2+c.Rnd.Duration(iv/2+1), c.RenewalWait(deadline, now)))
}

// RenewalWait is the longest a renewal of a lock valid until deadline may
// wait at now: never so long that it could not be confirmed (one node
// timeout) with a node timeout to spare before the deadline, never less
// than a quarter node timeout.
func (c *Config) RenewalWait(deadline, now time.Time) time.Duration {
	return max(c.NodeTimeout/4, deadline.Sub(now)-2*c.NodeTimeout)
}
