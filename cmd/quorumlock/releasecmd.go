package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	wire "github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/redlock"
)

const releaseSynopsis = `usage: quorumlock release [flags] KEY [--] TOKEN

Release the lock KEY that TOKEN holds, from any process: a quorum of nodes
must first confirm the token (the lock lives --ttl more on them; an expired
lock is never re-created), then the lock is released on every node. TOKEN
is the token as "quorumlock hold" and "quorumlock status" print it (its
random part, which identifies the holder: paste it as it is), or an exec'd
command's whole QUORUMLOCK_TOKEN.

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
	l, err := client.Resume(ctx, key, holderToken(ctx, client, key, token))
	if err == nil {
		err = l.Release(ctx)
	}
	if err != nil {
		return notReleased(e, key, err, n)
	}
	fmt.Fprintf(e.stdout, "released %s\n", key)
	return exitOK
}

// holderToken is the whole token of KEY's holder when token is its random
// part alone (as hold and status print it) and the holder's token carries a
// description (--metadata): the random part identifies the holder. Else,
// or when the nodes cannot tell, it is token: Resume then checks it on the
// nodes, which confirm the whole token, so a holder that changed meanwhile
// is never released.
func holderToken(ctx context.Context, client *redlock.Client, key, token string) string {
	if strings.ContainsRune(token, wire.Meta) {
		return token
	}
	in, _ := client.Inspect(ctx, key)
	if in == nil || in.State != redlock.StateHeld || in.Holder != token || in.Metadata == "" {
		return token
	}
	return token + string(wire.Meta) + in.Metadata
}

// notReleased reports why a release by token failed, and returns the exit
// status.
func notReleased(e *env, key string, err error, n int) int {
	if errors.Is(err, redlock.ErrAuth) {
		return reportRefused(e, "release", err)
	}
	if qe, down := unreachable(err); down {
		return reportUnavailable(e, "release", answered(qe), n, qe.Quorum, failures(qe), true)
	}
	if errors.Is(err, redlock.ErrNotHeld) {
		fmt.Fprintf(e.stderr, "quorumlock release: lock %q is not held by this token: %s\n", key, cliTerms(err))
		return exitFree
	}
	fmt.Fprintf(e.stderr, "quorumlock release: %s\n", cliTerms(err))
	return exitUsage
}
