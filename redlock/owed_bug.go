//go:build quorumlock_bug_latedrop

package redlock

// resendOwed, with -tags quorumlock_bug_latedrop (package bugs), is false,
// as it was: a release owed for a yes that was seen is sent once, and
// dropped when that send fails.
const resendOwed = false
