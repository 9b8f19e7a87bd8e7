//go:build !quorumlock_bug_resumemark

package redlock

import "github.com/quorumlock/quorumlock/internal/node"

// resumeRefuses are the bytes Resume refuses in a token: every mark of a
// value the nodes keep (node.Marks).
const resumeRefuses = node.Marks
