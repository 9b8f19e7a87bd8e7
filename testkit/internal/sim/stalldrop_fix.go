//go:build !quorumlock_bug_stalldrop

package sim

// dropStalledReplies is the defect of quorumlock_bug_stalldrop, off: the
// replies that reach a client while it stands still wait for the stall's
// end (stallGate).
const dropStalledReplies = false
