//go:build quorumlock_bug_stalldrop

package sim

// dropStalledReplies puts back a defect of the stall's model (the
// simulator's Pool, not the library): a reply that reaches a client while
// it stands still is dropped instead of waiting for the stall's end, as a
// Pool that gives up on a connection whose reader could not run would
// drop it. The caller then learns of its command only from its Pool's
// timeout, a follow budget later (TestFindsBugStallDrop).
const dropStalledReplies = true
