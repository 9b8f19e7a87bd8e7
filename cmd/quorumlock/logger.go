package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"

	"github.com/quorumlock/quorumlock/pool"
)

// lineHandler is a slog.Handler that writes one plain line per record at
// Warn and above, for people: "quorumlock exec: redlock: renewal failed
// key=deploy err=...", without time or level.
type lineHandler struct {
	mu     *sync.Mutex
	w      io.Writer
	prefix string
	guards *guardNotes // nil: restart guard refusals are dropped
	attrs  []slog.Attr
}

func newLineHandler(w io.Writer, prefix string, guards *guardNotes) *lineHandler {
	return &lineHandler{mu: new(sync.Mutex), w: w, prefix: prefix, guards: guards}
}

func (h *lineHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

// Handle writes r as one line in the command's terms (see libraryTerms).
// A record about a node the restart guard refuses becomes the command's
// own line for it, once per node (guardNotes.say: the node, when it votes,
// --restart-guard), so that a --wait is not silent while it waits the
// guard out. It drops one about a connection closed without an error
// (retired).
func (h *lineHandler) Handle(_ context.Context, r slog.Record) error {
	if re := guardRefusal(r); re != nil {
		if h.guards != nil {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.guards.say(h.w, h.prefix, re.Pool, re, true)
		}
		return nil
	}
	if retired(r) {
		return nil
	}
	var b strings.Builder
	b.WriteString(h.prefix)
	b.WriteString(r.Message)
	write := func(a slog.Attr) bool {
		v := a.Value.Resolve().String()
		if v == "" || strings.ContainsAny(v, " \"=") {
			v = strconv.Quote(v)
		}
		b.WriteString(" " + a.Key + "=" + v)
		return true
	}
	for _, a := range h.attrs {
		write(a)
	}
	r.Attrs(write)
	b.WriteByte('\n')
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := io.WriteString(h.w, libraryTerms.Replace(b.String()))
	return err
}

// retired reports whether r is a Pool's line about a connection closed
// without an error (go-redis retired it, as it does with one the restart
// guard refused at set-up): no news for a command that runs for seconds.
func retired(r slog.Record) bool {
	if !strings.Contains(r.Message, "closed a connection") {
		return false
	}
	found := false
	r.Attrs(func(a slog.Attr) bool {
		found = a.Key == "after" && strings.HasPrefix(a.Value.String(), "no error")
		return !found
	})
	return found
}

// guardRefusal returns the restart guard's refusal r carries, or nil.
func guardRefusal(r slog.Record) *pool.RestartError {
	var re *pool.RestartError
	r.Attrs(func(a slog.Attr) bool {
		err, ok := a.Value.Resolve().Any().(error)
		return !ok || !errors.As(err, &re)
	})
	return re
}

func (h *lineHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr(nil), h.attrs...), attrs...)
	return &c
}

// WithGroup is not needed by redlock's logging: groups are flattened.
func (h *lineHandler) WithGroup(string) slog.Handler { return h }
