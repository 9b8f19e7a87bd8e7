package sim

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/internal/node"
)

// mutants are the controls that run a broken script on every node, by the
// control's name: each returns the broken text for the library's, and any
// other script as it is. They show that the checker catches a script that
// lets two locks hold one key (TestFindsBrokenAcquireAll, TestFindsBrokenShared,
// TestFindsBrokenPermit), or two leaders share a term (TestFindsSameTerm).
var mutants = map[control]func(src string) string{
	// acquire_all.lua without its "taken" check: it sets every key,
	// whoever holds it.
	takeAll: mutant(node.AcquireAll, "  elseif o then\n    return 0\n  end\n", "  end\n"),
	// acquire_all.lua that checks only its first key: it takes the others
	// from their holders.
	firstOnly: mutant(node.AcquireAll, "for i = 1, n do\n  local o = free_for", "for i = 1, 1 do\n  local o = free_for"),
	// acquire_shared.lua without its "taken" check for a key held alone:
	// it makes the key shared over its holder.
	joinHeld: mutant(node.AcquireShared, "if v and not shared and owner(k, v) or waiting(k) then", "if waiting(k) then"),
	// release_shared.lua that deletes the key (and the holders' set) at
	// every release, whoever remains.
	dropShared: mutant(node.ReleaseShared, "if last > now then", "if false then"),
	// acquire_permit.lua without its refusal of a permit held by another
	// token: it sets the permit's key over its holder.
	takePermit: mutant(node.AcquirePermit, "if v and v ~= ARGV[1] then\n  return '0' .. table.concat(free)\nend\nif not v then", "if v ~= ARGV[1] then"),
	// acquire_fenced.lua that reads the counter instead of incrementing
	// it (1 when absent): a new holder's fence, an election's new term,
	// is the one before it.
	sameTerm: mutant(node.AcquireFenced, "local n = redis.call('INCR', KEYS[2])", "local n = tonumber(redis.call('GET', KEYS[2]) or '1')"),
}

// mutant returns a function that gives kind's script with old replaced by
// new (once) in place of the library's text, and every other script as it
// is. The broken text is made once, so that the engine's cache of compiled
// scripts keeps it; it panics, on first use, if old is not in the script.
func mutant(kind node.Kind, old, new string) func(string) string {
	broken := sync.OnceValues(func() (string, string) {
		src := scriptOf(kind)
		if !strings.Contains(src, old) {
			panic(fmt.Sprintf("sim: the %s script has no %q to break", kindNames[kind], old))
		}
		return src, strings.Replace(src, old, new, 1)
	})
	return func(src string) string {
		if orig, b := broken(); src == orig {
			return b
		}
		return src
	}
}

// scriptOf returns the text of kind's script as node.Op.Eval sends it.
func scriptOf(kind node.Kind) string {
	var c srcCapture
	node.New(node.Op{Kind: kind, Key: "k", Keys: []any{"k"}, Token: "t"}).Eval(context.Background(), &c)
	return c.src
}

// srcCapture is a redis.Scripter that keeps the text of the script it is
// asked to run.
type srcCapture struct {
	scripter
	src string
}

func (c *srcCapture) Eval(ctx context.Context, script string, _ []string, _ ...any) *redis.Cmd {
	c.src = script
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(redis.Nil)
	return cmd
}
