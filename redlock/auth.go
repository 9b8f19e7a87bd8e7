package redlock

import (
	"github.com/quorumlock/quorumlock/internal/node"

	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"
)

// nodeErrText is a node's error as an error message shows it: a refusal
// of the Client's credentials or rights says what it means first.
func nodeErrText(err error) string {
	if what := node.AuthRefusal(err); what != "" {
		return what + " (" + replyText(err) + ")"
	}
	return err.Error()
}

// replyText is the node's own error reply in err, or err's text when it
// holds none.
func replyText(err error) string {
	var rerr redis.Error
	if errors.As(err, &rerr) {
		return rerr.Error()
	}
	return err.Error()
}

// refusers returns the nodes that refused the Client's credentials or
// rights, and what each refusal means (distinct, in the nodes' order).
func (e *QuorumError) refusers() (nodes, kinds []string) {
	for _, r := range e.Nodes {
		if what := node.AuthRefusal(r.Err); what != "" {
			nodes = append(nodes, r.Node)
			if !slices.Contains(kinds, what) {
				kinds = append(kinds, what)
			}
		}
	}
	return nodes, kinds
}

// refusedQuorum reports whether so many nodes refused the Client's
// credentials or rights that the others could not make a quorum.
func (e *QuorumError) refusedQuorum() bool {
	nodes, _ := e.refusers()
	return len(nodes) > len(e.Nodes)-e.Quorum
}

// writeRefusal writes the summary of an error that refusedQuorum: the
// cause first, the nodes that gave it, and what to check.
func (e *QuorumError) writeRefusal(b *strings.Builder) {
	nodes, kinds := e.refusers()
	fmt.Fprintf(b, "redlock: %s %q", e.Op, e.Key)
	if e.Phase != "" {
		fmt.Fprintf(b, " (%s)", e.Phase)
	}
	fmt.Fprintf(b, ": %s on %s: %d of %d nodes refused this Client, leaving no quorum (%d needed); check each pool's password and user and the user's ACL rules (docs/deployments.md)",
		strings.Join(kinds, ", "), strings.Join(nodes, ", "), len(nodes), len(e.Nodes), e.Quorum)
}
