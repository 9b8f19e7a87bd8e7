//go:build !quorumlock_bug_leavelate

package redlock

// leaveInOrder: a Lock call that ends without the lock leaves its line
// before it returns: it waits for the nodes' answers (leaveLine).
const leaveInOrder = true
