//go:build quorumlock_bug_leavelate

package bugs

func init() { LeaveLate = true }
