//go:build quorumlock_bug_resumemark

package redlock

import (
	"strings"

	"github.com/quorumlock/quorumlock/internal/node"
)

// markIn, with -tags quorumlock_bug_resumemark (package bugs), is Resume's
// check as it was: a shared key's mark (0x1c) passes, so Resume takes a
// shared key's value for a token.
func markIn(token string) int {
	if i := strings.IndexByte(token, node.Sep); i >= 0 {
		return i
	}
	if token[0] == node.Handed {
		return 0
	}
	return -1
}
