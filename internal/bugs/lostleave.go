//go:build quorumlock_bug_lostleave

package bugs

func init() { LostLeave = true }
