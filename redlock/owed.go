//go:build !quorumlock_bug_latedrop

package redlock

// resendOwed: a release owed for a yes that was seen is sent again until a
// node answers it (releaseUnsure).
const resendOwed = true
