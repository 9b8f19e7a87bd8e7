package integration

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
)

// logCount is a slog.Handler that counts the records the chaos run's
// Clients log, by kind (the message's words before the node's name or the
// first colon), so that a run shows how much an operator's log would hold.
type logCount struct {
	mu    sync.Mutex
	kinds map[string]int
}

func (h *logCount) Enabled(context.Context, slog.Level) bool { return true }
func (h *logCount) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *logCount) WithGroup(string) slog.Handler            { return h }

func (h *logCount) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.kinds == nil {
		h.kinds = map[string]int{}
	}
	h.kinds[r.Level.String()+" "+kindOf(r.Message)]++
	return nil
}

// kindOf is msg without what varies: "redlock: node node2 unreachable since
// T; ..." is "node unreachable".
func kindOf(msg string) string {
	msg = strings.TrimPrefix(msg, "redlock: ")
	msg, _, _ = strings.Cut(msg, ";")
	msg, _, _ = strings.Cut(msg, ":")
	w := strings.Fields(msg)
	if len(w) > 2 && w[0] == "node" { // node <name> <what>...
		w = append(w[:1], w[2:]...)
		for i, s := range w {
			if s == "since" || s == "after" {
				w = w[:i]
				break
			}
		}
	}
	return strings.Join(w, " ")
}

// String lists the kinds and their counts, most first.
func (h *logCount) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	kinds := slices.Collect(maps.Keys(h.kinds))
	slices.SortFunc(kinds, func(a, b string) int { return h.kinds[b] - h.kinds[a] })
	total := 0
	parts := make([]string, len(kinds))
	for i, k := range kinds {
		total += h.kinds[k]
		parts[i] = fmt.Sprintf("%d %s", h.kinds[k], k)
	}
	return fmt.Sprintf("%d lines: %s", total, strings.Join(parts, ", "))
}

func TestLogKind(t *testing.T) {
	for msg, want := range map[string]string{
		"redlock: node node2 unreachable since 2026-11-27T06:29:02Z; keys this Client could not release there expire": "node unreachable",
		"redlock: node node2 answers again after 96ms unreachable (2 failed commands)":                                "node answers again",
		"redlock: node node2 refuses a lock command: NOPERM no permission; its key there expires":                     "node refuses a lock command",
		"redlock: lock lost": "lock lost",
	} {
		if got := kindOf(msg); got != want {
			t.Errorf("kindOf(%q) = %q, want %q", msg, got, want)
		}
	}
}
