// Package history records what the clients of a test did to a set of
// quorumlock locks, on one monotonic test clock, and checks the record
// against the library's safety and liveness properties. A Recorder records
// one client's lock calls and critical sections; Check checks them all:
//
//   - S1: no two successful acquisitions of one key have overlapping
//     validity windows (a session lock's lasts as long as the deadlines its
//     holder read, see Lease);
//   - S2: an acquisition or extend succeeds only with a quorum of nodes
//     that said yes before it returned, and with validity left;
//   - S3: release, extend and the fencing write-back never change a key
//     that holds another token (audited on every node, from the servers'
//     own MONITOR stream);
//   - S4: fencing tokens of successive holders strictly increase;
//   - S5: a counter guarded by the lock equals the number of critical
//     sections that incremented it;
//   - L1: a lock whose holder died is free again within TTL + drift, and no
//     lock key outlives the longest TTL (a session lock's key may, but not
//     the session key that keeps it held; see node.ParseSession);
//   - L2: no key of a failed acquisition, and none of a released lock, is
//     left on a node once the library's clean-up is over: at the end of
//     the run, and in sweeps during it (late deliveries included);
//   - LIN: the history of acquisitions, releases and guarded increments is
//     linearizable against a mutex-plus-counter model
//     (github.com/anishathalye/porcupine);
//   - SEC: no two critical sections of one key, under different locks,
//     overlap in time (see Config.TolerateOverruns for a section that ran
//     past its own lock's validity);
//   - WF: writers first: no node admits a shared holder of a key while a
//     waiter of Lock for it alone is certainly in its line there (see
//     checkWF for the rule; Config.WritersFirst);
//   - LB: the sets the nodes keep beside a lock key (its line of waiters,
//     its shared holders) never exceed their bounds (Config.LineMax,
//     Config.SharedMax), as reads of the nodes found them (AddSetSizes);
//   - ERR: no node answers a command with an error reply, in a run that
//     injects none (Config.ErrorReplies);
//   - LV: a Lock call that ended holds no reader back: in a calm run, a
//     shared TryLock is not refused while only shared holders hold the key
//     and no waiter of Lock for it is left (Config.Calm).
//
// A lock of several keys (Client.TryLockAll, LockAll, DoAll; recorded by
// Recorder.AcquireAll and DoAll, with Op.Keys) is judged as a holder of
// each of its keys: no other lock of any of them, of one key or of
// several, may overlap it there.
//
// A History is filled while the test runs (every method is safe for
// concurrent use) and checked once at the end with Check, which returns a
// Report naming every violation. An Audit follows the MONITOR stream of
// every node (see Monitor) and reports S3 violations. The checker is only
// as good as what it is given: each property says in its doc what it
// needs, and the Report says what was checked and how often.
//
// The windows and bounds the checker uses are chosen so that a correct
// library in a run that respects the documented assumptions (docs/safety.md)
// is never reported, and so that every report names a real breach of a
// property; where the record cannot tell, the checker does not guess, and
// counts the case as unchecked. See Check for the reasoning of each
// property.
package history
