package main

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
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

func (h *lineHandler) Handle(_ context.Context, r slog.Record) error {
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
	_, err := io.WriteString(h.w, b.String())
	return err
}

func (h *lineHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr(nil), h.attrs...), attrs...)
	return &c
}

// WithGroup is not needed by redlock's logging: groups are flattened.
func (h *lineHandler) WithGroup(string) slog.Handler { return h }
