package redlock

import (
	"errors"
	"fmt"
	"strings"

	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/internal/session"
)

// An attempt's token: made by the session, the library or the caller's
// generator (WithTokenGenerator), checked, and, when the caller's generator
// made it, claimed on the attempt's keys for as long as the attempt, and
// the Lock it acquires, may hold it.

// newToken returns an attempt's token: the session's, or cfg's generator's,
// checked.
func newToken(cfg *config, s *session.Session) (string, error) {
	if s != nil {
		return withMetadata(s.Token(), cfg), nil
	}
	token, err := cfg.token()
	switch {
	case err != nil:
		return "", err
	case token == "":
		return "", errors.New("it returned an empty token")
	case strings.IndexByte(token, node.Meta) >= 0:
		return "", fmt.Errorf("it returned a token with the byte %q, which marks a lock's metadata", node.Meta)
	case node.MarkIn(token) >= 0:
		return "", fmt.Errorf("it returned a token with the byte %q, which marks values the nodes keep (shared keys, keys handed to waiters, session locks)", token[node.MarkIn(token)])
	}
	return withMetadata(token, cfg), nil
}

// withMetadata is token with cfg's metadata (WithMetadata), if any.
func withMetadata(token string, cfg *config) string {
	if cfg.metadata == "" {
		return token
	}
	return token + string(node.Meta) + cfg.metadata
}

// tokenClaim is a key and a token from WithTokenGenerator that a live
// Lock of this Client, or an attempt under way, holds or may take. The
// nodes answer yes to the token a key holds (so that a command sent again
// finds its own key): without the claims, a generator that repeats a
// token would make a second holder of a key held in this process.
type tokenClaim struct{ rkey, token string }

// claim claims token on every key of t, for an attempt under cfg whose
// token the caller's generator made (the library's and sessions' tokens
// never repeat: nothing to claim). It claims nothing and returns an error
// matching ErrNotAcquired when one of them is claimed already.
func (c *Client) claim(cfg *config, t *target, token string) error {
	if !cfg.customToken {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	taken := false
	t.each(func(rkey string) { _, held := c.claims[tokenClaim{rkey, token}]; taken = taken || held })
	if taken {
		return fmt.Errorf("the token generator returned %q, which a Lock of this Client holds on the key, or an attempt under way may take: a second holder of one token (tokens must be unique, see WithTokenGenerator): %w", token, ErrNotAcquired)
	}
	if c.claims == nil {
		c.claims = map[tokenClaim]struct{}{}
	}
	t.each(func(rkey string) { c.claims[tokenClaim{rkey, token}] = struct{}{} })
	return nil
}

// unclaim ends the claims of token on the keys each visits, made under cfg.
func (c *Client) unclaim(cfg *config, each func(func(rkey string)), token string) {
	if !cfg.customToken {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	each(func(rkey string) { delete(c.claims, tokenClaim{rkey, token}) })
}
