//go:build !quorumlock_bug_heldresend

package redlock

// releaseResendsAll: a Release's failed delete is re-sent while it finds
// nothing only where the acquire's fate is unknown, and a delete held back
// behind a SET that answered after the round ended is late's (releaseLocked).
const releaseResendsAll = false
