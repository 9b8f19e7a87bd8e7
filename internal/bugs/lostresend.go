//go:build quorumlock_bug_lostresend

package bugs

func init() { LostResend = true }
