package redlock

import "time"

// TTL returns the TTL the lock was acquired with (its call's WithTTL, else
// the Client's), which Extend(ctx, 0) asks for; other Extends leave it.
func (l *Lock) TTL() time.Duration { return l.cfg.TTL }

// TTL returns the TTL the Client's locks ask for unless a call passes its
// own WithTTL: the Client's WithTTL, or DefaultTTL. Safe for concurrent use.
func (c *Client) TTL() time.Duration { return c.cfg.TTL }
