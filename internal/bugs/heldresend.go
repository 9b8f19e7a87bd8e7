//go:build quorumlock_bug_heldresend

package bugs

func init() { HeldResend = true }
