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
	attrs  []slog.Attr
}

func newLineHandler(w io.Writer, prefix string) *lineHandler {
	return &lineHandler{mu: new(sync.Mutex), w: w, prefix: prefix}
}

func (h *lineHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

// Handle writes r as one line in the command's terms (see libraryTerms).
// It drops a record about a node the restart guard refuses: the command
// says that itself, in its terms, when the node's vote is missed
// (reportUnavailable), and the library would log it as unreachable; and
// one about a connection closed without an error (retired).
func (h *lineHandler) Handle(_ context.Context, r slog.Record) error {
	if guardRefusal(r) || retired(r) {
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

// guardRefusal reports whether r carries an error of the restart guard.
func guardRefusal(r slog.Record) bool {
	found := false
	r.Attrs(func(a slog.Attr) bool {
		err, ok := a.Value.Resolve().Any().(error)
		found = ok && errors.Is(err, pool.ErrRestarted)
		return !found
	})
	return found
}

func (h *lineHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr(nil), h.attrs...), attrs...)
	return &c
}

// WithGroup is not needed by redlock's logging: groups are flattened.
func (h *lineHandler) WithGroup(string) slog.Handler { return h }
