package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/quorumlock/quorumlock/redlock"
)

const releaseSynopsis = `usage: quorumlock release [flags] KEY [--] TOKEN

Release the lock KEY that TOKEN holds (as "quorumlock hold" printed it, or
an exec'd command's QUORUMLOCK_TOKEN), from any process: a quorum of nodes
must first confirm the token (the lock lives --ttl more on them; an expired
lock is never re-created), then the lock is released on every node.

Exit status: 0 released; 1 TOKEN does not hold KEY (it expired, was released,
or another holder has it; a lock an auto-renewed library Client holds through
a renewal session cannot be released from another process); 2 bad usage;
5 too few nodes answered.

Example:
  quorumlock release deploy-prod "$TOKEN"
`

// releaseCommand implements "quorumlock release".
func releaseCommand(ctx context.Context, e *env, args []string) int {
	fs := newFlagSet("release", releaseSynopsis, "")
	var lf lockFlags
	lf.register(fs, "(here: the TTL the token is confirmed with before the release)")
	pos, code, ok := parsePositional(e, fs, args, "KEY", "TOKEN")
	if !ok {
		return code
	}
	key := pos[0]
	token, err := readToken(pos[1])
	if err != nil {
		return usageError(e, "release", err)
	}
	client, n, closeAll, err := lf.client(e, "release")
	if err != nil {
		return usageError(e, "release", err)
	}
	defer closeAll()
	l, err := client.Resume(ctx, key, token)
	if err == nil {
		err = l.Release(ctx)
	}
	if err != nil {
		return notReleased(e, key, err, n)
	}
	fmt.Fprintf(e.stdout, "released %s\n", key)
	return exitOK
}

// notReleased reports why a release by token failed, and returns the exit
// status.
func notReleased(e *env, key string, err error, n int) int {
	if qe, down := unreachable(err); down {
		fmt.Fprintf(e.stderr, "quorumlock release: lock service unavailable: %v\n"+
			"Only %d of %d nodes answered, %d needed.\n", err, answered(qe), n, qe.Quorum)
		return exitUnavailable
	}
	if errors.Is(err, redlock.ErrNotHeld) {
		fmt.Fprintf(e.stderr, "quorumlock release: lock %q is not held by this token: %v\n", key, err)
		return exitFree
	}
	fmt.Fprintf(e.stderr, "quorumlock release: %v\n", err)
	return exitUsage
}
