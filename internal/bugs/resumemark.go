//go:build quorumlock_bug_resumemark

package bugs

func init() { ResumeMark = true }
