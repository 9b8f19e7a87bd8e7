//go:build quorumlock_bug_leavelate

package redlock

// leaveInOrder, with -tags quorumlock_bug_leavelate (package bugs), is
// false, as it was: a Lock call that ends without the lock leaves its line
// in the background, and the Client's later commands overtake the leave.
const leaveInOrder = false
