package pool

// ConnStats counts what a Pool from Dial, DialURL or DialFailover did with
// its connections since it was made.
type ConnStats struct {
	// Dials counts the connections opened, DialErrors the dials that
	// failed.
	Dials, DialErrors int64
	// Closed counts the connections the Pool closed before its Close:
	// after a read or write failed (the server gone, or silent past a
	// command's deadline and its follow-up), or retired by go-redis (idle
	// too long, a failover). Each close is also logged (WithLogger), at
	// most one line per 10 s with the count since the last line. A process
	// that was only starved of CPU closes none.
	Closed int64
	// TimedOut counts, of Closed, the connections closed because a read
	// or write was still waiting when its deadline passed: a server silent
	// past a command's deadline and its follow-up (paused, cut off,
	// overloaded). The time the process stood still does not count
	// towards a deadline, so starving the process of CPU adds none.
	TimedOut int64
	// Waited counts the reads and writes that went on past their deadline
	// because the process had stood still (docs/design.md, "Starved
	// processes"), and then completed.
	Waited int64
}

// Stats returns p's connection counters. It reports false for a Pool from
// New, whose client's connections are the caller's, and for other Pool
// implementations. Safe for concurrent use.
func Stats(p Pool) (ConnStats, bool) {
	rp, ok := p.(*redisPool)
	if !ok || rp.cs == nil {
		return ConnStats{}, false
	}
	cs := rp.cs
	return ConnStats{Dials: cs.dials.Load(), DialErrors: cs.dialErrors.Load(), Closed: cs.closed.Load(), TimedOut: cs.timedOut.Load(), Waited: cs.waited.Load()}, true
}
