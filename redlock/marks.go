//go:build !quorumlock_bug_resumemark

package redlock

import "github.com/quorumlock/quorumlock/internal/node"

// markIn returns the index of the first byte of token that marks a value
// the nodes keep (node.Marks), or -1.
func markIn(token string) int { return node.MarkIn(token) }
