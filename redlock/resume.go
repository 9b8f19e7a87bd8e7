package redlock

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/quorumlock/quorumlock/internal/bugs"
	"github.com/quorumlock/quorumlock/internal/node"
)

// ErrSessionToken is matched by the error of Resume when nodes said the
// token is a lock's held through a renewal session (WithAutoExtend): such a
// lock lives while the session of the Client that took it lives, and only
// that Client can keep it. Acquire locks meant to be resumed with
// WithAutoExtend(false), WithMaxHold or WithFencing.
var ErrSessionToken = errors.New("redlock: the token is a session lock's, which only the Client that took it can keep")

var opResume = &opSpec{name: "resume", kind: node.Resume, yes: intPositive, no: OutcomeNotHeld, decisive: true}

// Resume returns a Lock for the lock on key held with token (a Lock.Token
// from before a restart, or another process's) once a quorum of nodes
// confirmed key holds token and made it live at least the TTL more; it never
// creates the key. The Lock is as if acquired at the round's start, with
// Fence 0 (keep Fence beside Token). Both handles act on one lock: a release
// by either ends it. On failure it returns a *QuorumError matching
// ErrNotHeld (ctx.Err() too if ctx ended first, ErrSessionToken too for a
// session lock's token), leaving the TTL it set where nodes confirmed. It is
// ErrClosed once Close has begun, and before any I/O a plain error for an
// empty key or token, a token with a byte 0x1c, 0x1e or 0x1f, or bad options.
func (c *Client) Resume(ctx context.Context, key, token string, opts ...Option) (*Lock, error) {
	cfg, err := c.callConfig("resume", key, opts)
	if err != nil {
		return nil, err
	}
	if err := resumable(token); err != nil {
		return nil, fmt.Errorf("redlock: resume %q: %w", key, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("redlock: resume %q: not attempted: %w (%w)", key, err, ErrNotHeld)
	}
	if err := c.enterRound(ctx, cfg); err != nil {
		return nil, err
	}
	defer c.wg.Done()
	a := &acquisition{start: cfg.Now(), kind: kindPlain} // a resumed lock runs a plain lock's commands
	a.rd = c.run(ctx, cfg, send{spec: opResume, o: node.Op{Key: c.redisKey(cfg, key), Token: token, TTL: cfg.TTL}})
	session := false
	for {
		rep, _, ok := a.rd.next()
		if !ok {
			break
		}
		session = session || rep.Err == nil && rep.Int < 0
	}
	if a.timed(cfg) > 0 && a.rd.won() {
		if l := c.newLock(ctx, cfg, key, a); l != nil {
			return l, nil
		}
		a.rd.finish(nil)
		return nil, ErrClosed
	}
	a.rd.finish(nil)
	return nil, resumeError(ctx, a, key, session)
}

// resumable checks a token given to Resume: a value the nodes keep as a
// mark (a shared key's, a handed key's, a session lock's, as GET prints
// them) is nobody's token.
func resumable(token string) error {
	if token == "" {
		return errors.New("the token is empty: pass the Token of the lock to resume")
	}
	refuses := node.Marks
	if bugs.ResumeMark { // as it was: a shared key's mark taken for a token
		refuses = string(node.Sep) + string(node.Handed)
	}
	if i := strings.IndexAny(token, refuses); i >= 0 {
		return fmt.Errorf("the token has the byte %q at %d, which no lock's token has: it marks values the nodes keep (0x1c a key with shared holders, 0x1e a key handed to a waiter, 0x1f a session lock); pass Lock.Token, not the key's value", token[i], i)
	}
	return nil
}

// resumeError is a failed resume round's error.
func resumeError(ctx context.Context, a *acquisition, key string, session bool) error {
	qe := a.rd.quorumError(key)
	qe.Elapsed = a.elapsed
	if a.rd.won() {
		qe.Validity = a.validity
	}
	var err error = qe
	if session {
		err = fmt.Errorf("%w: %w", qe, ErrSessionToken)
	}
	return withCaller(ctx, err)
}
