package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"

	wire "github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/redlock"
)

const holdSynopsis = `usage: quorumlock hold [flags] KEY

Acquire the lock KEY on a quorum of the Redis masters, waiting up to --wait,
print it, and keep it renewed every --ttl/3 until quorumlock gets SIGINT,
SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 or SIGUSR2; then release it and exit 0.
If the lock is lost meanwhile (released by token, or renewals failed until
its validity ended), exit 4. Another process can release it early with
"quorumlock release KEY TOKEN". The output, one line each:

  key KEY
  token TOKEN     (the random part that identifies this holder, as status
                   prints it; paste it as it is, without quotes: the
                   --metadata description is not part of it)
  fence FENCE     (0 with --fencing=false)

Example:
  quorumlock hold --metadata "$(hostname)" deploy-prod   # in one terminal
  quorumlock release deploy-prod "$TOKEN"                # in another
`

// holdCommand implements "quorumlock hold".
func holdCommand(ctx context.Context, e *env, args []string) int {
	fs := newFlagSet("hold", holdSynopsis, exitCodes)
	var lf lockFlags
	lf.register(fs, "while it is held")
	lf.registerAcquire(fs)
	pos, code, ok := parsePositional(e, fs, args, "KEY")
	if !ok {
		return code
	}
	key := pos[0]
	// Tokens of its own: a lock held through a renewal session (the
	// library's choice for auto-extended locks with its own tokens) could
	// not be released by another process (Client.Resume refuses them).
	client, n, closeAll, err := lf.client(e, "hold", redlock.WithTokenGenerator(newToken))
	if err != nil {
		return usageError(e, "hold", err)
	}
	defer closeAll()
	l, code := acquire(ctx, e, "hold", client, key, &lf, n)
	if l == nil {
		return code
	}
	fmt.Fprintf(e.stdout, "key %s\ntoken %s\nfence %d\n", key, showToken(l.Token()), l.Fence())
	select {
	case sig := <-e.signals:
		if err := l.Release(context.Background()); err != nil {
			fmt.Fprintf(e.stderr, "quorumlock hold: %s: releasing the lock %q: %s\n  It expires by itself within its TTL.\n", signalName(sig), key, cliTerms(err))
		}
		return exitOK
	case <-l.Done():
		fmt.Fprintf(e.stderr, "quorumlock hold: lock %q lost: %s\n", key, lossReason(client, l))
		return exitLost
	}
}

// lossReason says why the lock l was lost, as the nodes tell it now: they
// hold another token or none (it was released or taken by another
// process), or too few answer (its renewals failed, as logged above).
func lossReason(client *redlock.Client, l *redlock.Lock) string {
	in, _ := client.Inspect(context.Background(), l.Key()) // each node answers within --node-timeout
	own, _ := wire.SplitToken(l.Token())
	if in != nil && in.State != redlock.StateUnknown && in.Holder != own {
		return "released or taken by another process (the nodes no longer hold its token)"
	}
	return "its renewals failed until its validity ended (see above)"
}

// newToken is a lock token: 128 random bits, as the library makes them,
// but never starting with '-', so that "release KEY TOKEN" never reads it
// as a flag.
func newToken() (string, error) {
	var b [16]byte
	for {
		if _, err := rand.Read(b[:]); err != nil {
			return "", err
		}
		if t := base64.RawURLEncoding.EncodeToString(b[:]); t[0] != '-' {
			return t, nil
		}
	}
}

// showToken is how every command prints a token: its own part, without
// the holder's description (--metadata) that travels after the byte 0x1d
// (the own part alone identifies the holder, and release takes it), as is
// when a shell passes it on unquoted (always, for the tokens quorumlock
// and the library make), else quoted as a Go string (readToken reads both).
func showToken(token string) string {
	own, _ := wire.SplitToken(token)
	for _, r := range own {
		if !shellSafe(r) {
			return strconv.Quote(own)
		}
	}
	return own
}

// shellSafe reports whether a shell passes r on as it is, unquoted.
func shellSafe(r rune) bool {
	return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || strings.ContainsRune("_.:@%+=/-", r)
}

// readToken reads a token as showToken printed it: whole with its quotes
// (pasted inside single quotes), or, as a shell passes it when pasted as
// printed, without them and with its escapes (\x1d) as text. Tokens
// quorumlock makes have no backslash.
func readToken(s string) (string, error) {
	quoted := len(s) > 0 && s[0] == '"'
	if quoted || strings.IndexByte(s, '\\') >= 0 {
		if !quoted {
			s = `"` + s + `"`
		}
		t, err := strconv.Unquote(s)
		if err != nil {
			return "", fmt.Errorf("TOKEN %s: not a token as hold prints it: %v", s, err)
		}
		return t, nil
	}
	if s == "" {
		return "", errors.New("TOKEN is empty: pass the token hold printed")
	}
	return s, nil
}
