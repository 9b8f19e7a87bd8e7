// Package tokens makes a lock attempt's token, and keeps a Client's claims
// on the tokens its caller's generator made, so that a generator that
// repeats a token cannot make a second holder in one process.
package tokens

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/quorumlock/quorumlock/internal/node"
)

// Make returns an attempt's token, with metadata (if not "") after
// node.Meta: sess, a session's token, when not ""; else gen's, which it
// checks. Its error says what was wrong with gen's token, or is gen's.
func Make(gen func() (string, error), sess, metadata string) (string, error) {
	token := sess
	if token == "" {
		var err error
		if token, err = gen(); err != nil {
			return "", err
		}
		if err := check(token); err != nil {
			return "", err
		}
	}
	if metadata == "" {
		return token, nil
	}
	return token + string(node.Meta) + metadata, nil
}

// check says what makes token, from a caller's generator, no lock's token.
func check(token string) error {
	switch {
	case token == "":
		return errors.New("it returned an empty token")
	case strings.IndexByte(token, node.Meta) >= 0:
		return fmt.Errorf("it returned a token with the byte %q, which marks a lock's metadata", node.Meta)
	case node.MarkIn(token) >= 0:
		return fmt.Errorf("it returned a token with the byte %q, which marks values the nodes keep (shared keys, keys handed to waiters, session locks)", token[node.MarkIn(token)])
	}
	return nil
}

// Claims is the set of keys and tokens from a caller's generator that a
// live Lock of a Client, or an attempt under way, holds or may take. The
// nodes answer yes to the token a key holds (so that a command sent again
// finds its own key): without the claims, a generator that repeats a
// token would make a second holder of a key held in this process. The
// zero Claims is empty and ready; its methods are safe for concurrent use.
type Claims struct {
	mu sync.Mutex
	m  map[claim]struct{}
}

type claim struct{ rkey, token string }

// Claim claims token on every Redis key each visits and returns true, or
// claims nothing and returns false when one of them is claimed already.
func (c *Claims) Claim(each func(func(rkey string)), token string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	taken := false
	each(func(rkey string) { _, held := c.m[claim{rkey, token}]; taken = taken || held })
	if taken {
		return false
	}
	if c.m == nil {
		c.m = map[claim]struct{}{}
	}
	each(func(rkey string) { c.m[claim{rkey, token}] = struct{}{} })
	return true
}

// Unclaim ends the claims of token on the keys each visits.
func (c *Claims) Unclaim(each func(func(rkey string)), token string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	each(func(rkey string) { delete(c.m, claim{rkey, token}) })
}

// Reset ends every claim.
func (c *Claims) Reset() {
	c.mu.Lock()
	c.m = nil
	c.mu.Unlock()
}
