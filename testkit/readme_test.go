package testkit_test

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/testkit"
	"github.com/quorumlock/quorumlock/testkit/history"
)

// runJob stands for the user's critical section.
func runJob(ctx context.Context) error {
	select {
	case <-time.After(5 * time.Millisecond):
		return nil
	case <-ctx.Done(): // the lock was lost: stop acting under it
		return ctx.Err()
	}
}

// TestJobUnderFaults is the README's example ("Test your own code under
// faults"), word for word between the markers.
func TestJobUnderFaults(t *testing.T) {
	// README example begins
	cluster := testkit.Start(t, 5) // five real Redis masters
	h := history.New()
	worker := h.Recorder("worker", cluster.LockClient(t))
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 10 {
				_ = worker.Do(t.Context(), "nightly-report", runJob)
			}
		})
	}
	time.AfterFunc(100*time.Millisecond, func() { _ = cluster.Node(0).Kill() }) // a master dies mid-run
	wg.Wait()
	if r := history.Check(h, history.Config{Nodes: 5}); r.Total() > 0 {
		t.Fatal(r) // names every overlap of two holders, and more
	}
	// README example ends
	if err := cluster.Clients(t)[0].Ping(t.Context()).Err(); err == nil {
		t.Error("node 0 is still up: the example's jobs ran without the fault")
	}
	if r := history.Check(h, history.Config{Nodes: 5}); r.Acquired != 40 || r.Checked[history.SEC] == 0 {
		t.Fatalf("the example did not run its 40 jobs under the lock:\n%v", r)
	}
}

// TestReadmeShowsTheExample: the README's code block under "Test your own
// code under faults" is TestJobUnderFaults' body between its markers.
func TestReadmeShowsTheExample(t *testing.T) {
	src, err := os.ReadFile("readme_test.go")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	body := between(string(src), "\t// README example begins\n", "\t// README example ends\n")
	if body == "" {
		t.Fatal("readme_test.go lost its markers")
	}
	var shown strings.Builder // the body, one tab less indented
	for _, line := range strings.SplitAfter(body, "\n") {
		shown.WriteString(strings.TrimPrefix(line, "\t"))
	}
	if !strings.Contains(string(readme), "```go\n"+shown.String()+"```\n") {
		t.Errorf("README.md does not show TestJobUnderFaults' body as it is:\n%s", shown.String())
	}
}

func between(s, begin, end string) string {
	i := strings.Index(s, begin)
	j := strings.Index(s, end)
	if i < 0 || j < i {
		return ""
	}
	return s[i+len(begin) : j]
}
