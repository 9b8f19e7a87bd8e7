package tokens

import (
	"errors"
	"strings"
	"testing"

	"github.com/quorumlock/quorumlock/internal/node"
)

// TestMake: a session's token is taken as it is; a generator's is checked;
// metadata follows node.Meta.
func TestMake(t *testing.T) {
	gen := func(tok string, err error) func() (string, error) { return func() (string, error) { return tok, err } }
	if tok, err := Make(gen("", errors.New("unused")), "sess1", ""); tok != "sess1" || err != nil {
		t.Fatalf("session token: %q, %v", tok, err)
	}
	if tok, err := Make(gen("abc", nil), "", "meta"); tok != "abc"+string(node.Meta)+"meta" || err != nil {
		t.Fatalf("with metadata: %q, %v", tok, err)
	}
	for _, bad := range []string{"", "a" + string(node.Meta) + "b", "a" + string(node.Sep)} {
		if _, err := Make(gen(bad, nil), "", ""); err == nil {
			t.Errorf("token %q accepted", bad)
		}
	}
	if _, err := Make(gen("", errors.New("boom")), "", ""); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("generator's error: %v", err)
	}
}

// TestClaims: a token claimed on one key of several blocks a claim of the
// same token on any set that shares that key, until unclaimed.
func TestClaims(t *testing.T) {
	keys := func(ks ...string) func(func(string)) {
		return func(f func(string)) {
			for _, k := range ks {
				f(k)
			}
		}
	}
	var c Claims
	if !c.Claim(keys("a", "b"), "t") {
		t.Fatal("first claim refused")
	}
	if c.Claim(keys("b", "c"), "t") {
		t.Fatal("token claimed twice on key b")
	}
	if !c.Claim(keys("b"), "u") || !c.Claim(keys("c"), "t") {
		t.Fatal("another token on b, or the token on c, refused")
	}
	c.Unclaim(keys("a", "b"), "t")
	if !c.Claim(keys("a", "b"), "t") {
		t.Fatal("claim refused after unclaim")
	}
	c.Reset()
	if !c.Claim(keys("b"), "u") {
		t.Fatal("claim refused after Reset")
	}
}
