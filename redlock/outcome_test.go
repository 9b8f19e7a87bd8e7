package redlock

import (
	"errors"
	"fmt"
	"testing"

	"github.com/quorumlock/quorumlock/internal/node"
)

// TestNotSentIsATimeout: a command whose deadline passed while it waited to
// be written (behind a frozen node's stuck connection) got no answer within
// the node timeout: its node's outcome is a timeout, as for one that was
// written and not answered, not an error.
func TestNotSentIsATimeout(t *testing.T) {
	c := newEnv(t, 3).client()
	for _, err := range []error{node.ErrNotSent, fmt.Errorf("pool: %w", node.ErrNotSent)} {
		if r := failedResult(0, c, err, 0); r.Outcome != OutcomeTimeout || !errors.Is(r.Err, node.ErrNotSent) {
			t.Errorf("%v: outcome %v (error %v); want a timeout keeping the error", err, r.Outcome, r.Err)
		}
	}
	if r := failedResult(0, c, errors.New("ERR wrong number of arguments"), 0); r.Outcome != OutcomeError {
		t.Errorf("a command error: outcome %v; want error", r.Outcome)
	}
}
