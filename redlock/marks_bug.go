//go:build quorumlock_bug_resumemark

package redlock

import "github.com/quorumlock/quorumlock/internal/node"

// resumeRefuses, with -tags quorumlock_bug_resumemark (package bugs), is
// Resume's check as it was: a session lock's separator and a handed key's
// mark, but not a shared key's (0x1c), so Resume takes a shared key's value
// for a token.
const resumeRefuses = string(node.Sep) + string(node.Handed)
