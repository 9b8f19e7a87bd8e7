package integration

import (
	"context"
	"errors"
	"fmt"
	"log"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redlock"
	hist "github.com/quorumlock/quorumlock/testkit/history"
)

// What the chaos runs tell as they go and at the end: the node answers of
// failed attempts, call latencies, go-redis' log lines, and the summary row.

// tally counts, over failed acquire calls, what each node answered in the
// last round (from the *redlock.QuorumError), to tell contention from
// timeouts, errors and restart-guard refusals in the progress lines.
type tally struct {
	mu    sync.Mutex
	delta map[string]int
	total map[string]int
	last  string
}

func newTally() *tally { return &tally{delta: map[string]int{}, total: map[string]int{}} }

func (t *tally) add(err error) {
	var qe *redlock.QuorumError
	t.mu.Lock()
	defer t.mu.Unlock()
	t.last = err.Error()
	if !errors.As(err, &qe) {
		t.delta["no round"]++
		t.total["no round"]++
		return
	}
	for _, n := range qe.Nodes {
		k := n.Outcome.String()
		if errors.Is(n.Err, pool.ErrRestarted) {
			k = "restart guard"
		}
		t.delta[k]++
		t.total[k]++
	}
}

// format lists m's counts, largest first.
func format(m map[string]int) string {
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, func(a, b string) int { return m[b] - m[a] })
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// take returns the counts since the last call.
func (t *tally) take() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := format(t.delta)
	clear(t.delta)
	return s
}

func (t *tally) all() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return format(t.total)
}

func (t *tally) lastErr() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.last
}

// latencies collects call durations from many goroutines.
type latencies struct {
	mu       sync.Mutex
	won, not []time.Duration
}

func (l *latencies) add(won bool, d time.Duration) {
	l.mu.Lock()
	if won {
		l.won = append(l.won, d)
	} else {
		l.not = append(l.not, d)
	}
	l.mu.Unlock()
}

func (l *latencies) get(won bool) []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if won {
		return slices.Clone(l.won)
	}
	return slices.Clone(l.not)
}

// countingLogger counts go-redis' log lines instead of printing them.
type countingLogger struct{ n atomic.Int64 }

func (l *countingLogger) Printf(context.Context, string, ...any) { l.n.Add(1) }

// stderrLogger prints like go-redis' default logger.
type stderrLogger struct{}

func (stderrLogger) Printf(_ context.Context, format string, v ...any) {
	_ = log.New(os.Stderr, "redis: ", log.LstdFlags|log.Lshortfile).Output(2, fmt.Sprintf(format, v...))
}

// checkedList names the properties checked, with their case counts.
func checkedList(r *hist.Report) string {
	var parts []string
	for _, p := range hist.Properties {
		if _, skipped := r.Skipped[p]; !skipped {
			parts = append(parts, fmt.Sprintf("%s (%d)", p, r.Checked[p]))
		}
	}
	return strings.Join(parts, ", ")
}

// violationList gives the number of violations, per property when any.
func violationList(r *hist.Report) string {
	if r.Total() == 0 {
		return "0"
	}
	var parts []string
	for _, p := range hist.Properties {
		if n := r.Count(p); n > 0 {
			parts = append(parts, fmt.Sprintf("%s: %d", p, n))
		}
	}
	return strings.Join(parts, ", ")
}
