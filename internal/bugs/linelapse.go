//go:build quorumlock_bug_linelapse

package bugs

func init() { LineLapse = true }
