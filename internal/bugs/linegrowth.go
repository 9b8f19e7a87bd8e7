//go:build quorumlock_bug_linegrowth

package bugs

func init() { LineGrowth = true }
