package history

// resumedHoldings adds to holds a lock held alone for each successful
// Resume (an Extend with Op.Resumed) whose token no acquisition won: a
// handle made from a value that no recorded lock holds (a value read from
// a node, such as a shared key's mark) claims the key for itself from the
// resume's return to its deadline, moved on by its extends and ended by
// its release like any lock's. It has no fence (S4 leaves it out). A resume of a token that an acquisition
// won is that lock's: its extend moves the lock's window (holdings).
func resumedHoldings(ops []Op, holds map[string]*holding, cfg Config) {
	for _, op := range ops {
		if op.Kind != Extend || !op.Resumed || op.Outcome != OK || op.Token == "" || holds[op.Token] != nil {
			continue
		}
		holds[op.Token] = &holding{
			key: op.Key, client: op.Client, token: op.Token, ttl: op.TTL,
			start: op.Start, ret: op.End, deadline: op.Deadline, resumed: true,
			round: max(op.Start, op.Deadline-(op.TTL-allowance(op.TTL, cfg))),
		}
	}
}

// resumedTokens are the tokens of successful resumes: from its return, a
// resumed handle holds its token (its Release removes it), whatever became
// of the acquire round that set it.
func resumedTokens(ops []Op) map[string]bool {
	m := map[string]bool{}
	for _, op := range ops {
		if op.Kind == Extend && op.Resumed && op.Outcome == OK {
			m[op.Token] = true
		}
	}
	return m
}
