package redlock

import "time"

// TTL returns the TTL the lock was acquired with: the Client's (WithTTL,
// default DefaultTTL) unless the acquiring call passed its own WithTTL. It
// is what Extend(ctx, 0) asks for; an Extend with another ttl does not
// change it. Safe for concurrent use.
func (l *Lock) TTL() time.Duration { return l.cfg.ttl }

// TTL returns the TTL the Client's locks ask for unless a call passes its
// own WithTTL: the Client's WithTTL, or DefaultTTL. Safe for concurrent use.
func (c *Client) TTL() time.Duration { return c.cfg.ttl }
