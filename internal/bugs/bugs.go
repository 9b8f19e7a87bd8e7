// Package bugs names the defects that a build tag puts back into the
// library, so that the simulator can show it finds each one by itself
// (docs/chaos.md, "What it found"). Each variable is false unless the build
// has its tag (quorumlock_bug_<name>); never ship a build with one of them.
// The variables are set before any package that imports bugs initialises,
// and never change: reading them is safe for concurrent use.
package bugs

var (
	// ResumeMark (quorumlock_bug_resumemark): Client.Resume and the scripts
	// take a shared key's value (0x1c and a token) for a token, so a resume
	// of a key held shared returns a lock held alone.
	ResumeMark bool
	// LineGrowth (quorumlock_bug_linegrowth): joining and leaving a line
	// never drop its lapsed entries and nothing caps it; only a release or a
	// shared acquire drops them, all in one unbounded call.
	LineGrowth bool
	// LineLapse (quorumlock_bug_linelapse): a join renews the line's TTL
	// only when it adds a waiter, so the line lapses while its waiters poll.
	LineLapse bool
	// LateDrop (quorumlock_bug_latedrop): a release owed for a yes that was
	// seen (a late yes, a lost lock) is not sent again when its send fails.
	LateDrop bool
	// LeaveLate (quorumlock_bug_leavelate): a Lock call that ends without
	// the lock leaves its line in the background, without waiting, so the
	// caller's next commands can overtake the leave.
	LeaveLate bool
	// HeldResend (quorumlock_bug_heldresend): a Release's delete held back
	// behind a SET that answered after the release round ended, never sent,
	// and every failed delete of a Release, are re-sent while they find
	// nothing, for TTL + the cleanup budget.
	HeldResend bool
	// LostResend (quorumlock_bug_lostresend): a session lock's key is
	// deleted again on a node whose delete a lost lock already owed: a
	// Release that finds the lock lost deletes it on every node twice (the
	// loss's background release and the round), and a Release after a loss
	// asks the nodes whose key the loss, or a late answer, already deletes.
	LostResend bool
	// LostLeave (quorumlock_bug_lostleave): the Release of a lost lock asks
	// only the nodes whose key no background delete frees, even when the
	// lock's waiter may still be in the key's line there, which only the
	// release round takes it out of: it stays until its entry lapses.
	LostLeave bool
	// SplitOnce (quorumlock_bug_splitonce): a waiter whose attempt split
	// the nodes' votes retries within the hand-off grace only once per
	// retry max, and otherwise sleeps out its poll, though releases that
	// hand the key to it on too few nodes wake nobody.
	SplitOnce bool
)

// Restored reports whether the defect named (the tag's suffix: "resumemark",
// "linegrowth", "linelapse", "latedrop", "leavelate", "heldresend",
// "lostresend", "lostleave", "splitonce") is put back.
func Restored(name string) bool {
	switch name {
	case "resumemark":
		return ResumeMark
	case "linegrowth":
		return LineGrowth
	case "linelapse":
		return LineLapse
	case "latedrop":
		return LateDrop
	case "leavelate":
		return LeaveLate
	case "heldresend":
		return HeldResend
	case "lostresend":
		return LostResend
	case "lostleave":
		return LostLeave
	case "splitonce":
		return SplitOnce
	}
	return false
}
