//go:build quorumlock_bug_heldresend

package redlock

// releaseResendsAll, with -tags quorumlock_bug_heldresend (package bugs), is
// true, as it was: every failed delete of a Release, held-back ones that
// were never sent included, is re-sent while it finds nothing, for TTL +
// the cleanup budget.
const releaseResendsAll = true
