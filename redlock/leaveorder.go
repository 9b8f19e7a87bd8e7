//go:build !quorumlock_bug_leavelate

package redlock

// leaveInOrder: a Lock call that ends without the lock leaves its line in
// order with the Client's later commands, and waits for it (leaveLine).
const leaveInOrder = true
