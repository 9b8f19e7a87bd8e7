//go:build quorumlock_bug_splitonce

package bugs

func init() { SplitOnce = true }
