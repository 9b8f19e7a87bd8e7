package integration

import (
	"os"
	"testing"

	"github.com/quorumlock/quorumlock/testkit/leakcheck"
)

// TestMain fails the run when a test leaves goroutines behind: Clients must
// join their late-reply clean-up in Close, pools and proxies must close
// (see package leakcheck for the one go-redis goroutine it waits for).
func TestMain(m *testing.M) { os.Exit(leakcheck.Run(m)) }
