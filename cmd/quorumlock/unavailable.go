package main

import (
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redlock"
)

// guardNotes are the nodes a command has said the restart guard keeps
// out, so that it says so once per node: when the library first logs the
// refusal (a --wait then waits it out), or when the command gives up
// (reportUnavailable). Safe for concurrent use; the zero value is ready.
type guardNotes struct {
	mu   sync.Mutex
	said map[string]bool
}

// say writes to w, after prefix, that the restart guard keeps node out
// (re) and when it votes, naming the flag that sets the guard (withFlag:
// the command has --restart-guard), unless it was said of node before.
func (g *guardNotes) say(w io.Writer, prefix, node string, re *pool.RestartError, withFlag bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.said[node] {
		return
	}
	if g.said == nil {
		g.said = map[string]bool{}
	}
	g.said[node] = true
	how := fmt.Sprintf("the restart guard of %v keeps a freshly restarted server out", re.Guard)
	if withFlag {
		how = fmt.Sprintf("--restart-guard %v; use --restart-guard 0 for test servers", re.Guard)
	}
	fmt.Fprintf(w, "%snode %s started %v ago; it votes in %v (%s)\n", prefix, node, re.Uptime, re.Remaining(), how)
}

// nodeFailure is one node that did not answer an operation, and why.
type nodeFailure struct {
	node string
	err  error
}

// failures are the nodes of qe that did not answer (an error, a timeout,
// or not asked because the connection check refused them).
func failures(qe *redlock.QuorumError) []nodeFailure {
	var out []nodeFailure
	for _, r := range qe.Nodes {
		switch r.Outcome {
		case redlock.OutcomeError, redlock.OutcomeTimeout, redlock.OutcomeNotAsked:
			out = append(out, nodeFailure{r.Node, r.Err})
		}
	}
	return out
}

// reportUnavailable reports on stderr that too few nodes answered command
// name's operation (answered of total, quorum needed), and returns
// exitUnavailable. The nodes the restart guard keeps out come first, each
// with when it votes and the flag that sets the guard (withFlag: the
// command has --restart-guard), unless the command said so already
// (e.guards); then the other failed nodes and what to check, only when
// there are any.
func reportUnavailable(e *env, name string, answered, total, quorum int, failed []nodeFailure, withFlag bool) int {
	var others []nodeFailure
	for _, f := range failed {
		var re *pool.RestartError
		if !errors.As(f.err, &re) {
			others = append(others, f)
			continue
		}
		e.guards.say(e.stderr, "quorumlock "+name+": ", f.node, re, withFlag)
	}
	kept := ""
	if n := len(failed) - len(others); n > 0 {
		kept = fmt.Sprintf(" (%d kept out by the restart guard, above)", n)
	}
	fmt.Fprintf(e.stderr, "quorumlock %s: lock service unavailable: only %d of %d nodes answered, %d needed%s\n", name, answered, total, quorum, kept)
	if len(others) == 0 {
		return exitUnavailable
	}
	for _, f := range others {
		fmt.Fprintf(e.stderr, "  node %s: %s\n", f.node, cliTerms(f.err))
	}
	fmt.Fprintf(e.stderr, "Check that these nodes are running and reachable from here, and that --addrs or %s lists them right.\n", envAddrs)
	return exitUnavailable
}

// unreachable reports whether a failed operation failed because too few
// nodes answered, or too many refused the credentials (rather than because
// another holder has the lock), and returns its details.
func unreachable(err error) (*redlock.QuorumError, bool) {
	var qe *redlock.QuorumError
	if !errors.As(err, &qe) {
		return nil, false
	}
	return qe, errors.Is(err, redlock.ErrUnavailable) || errors.Is(err, redlock.ErrAuth)
}

// reportRefused reports on stderr that too many nodes refused command
// name's password or user (err matches redlock.ErrAuth), and returns
// exitUnavailable.
func reportRefused(e *env, name string, err error) int {
	fmt.Fprintf(e.stderr, "quorumlock %s: lock service unavailable: %s\n"+
		"The nodes refused the password or user: check it (in the redis:// URLs of --addrs or %s, or in --password-file).\n", name, cliTerms(err), envAddrs)
	return exitUnavailable
}

// answered counts the nodes that gave an answer in a failed operation.
func answered(qe *redlock.QuorumError) int {
	return len(qe.Nodes) - len(failures(qe))
}
