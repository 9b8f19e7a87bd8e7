//go:build quorumlock_bug_latedrop

package bugs

func init() { LateDrop = true }
