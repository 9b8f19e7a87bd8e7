// Package golog keeps go-redis' process-wide logger from speaking for the
// library's own connections.
//
// go-redis logs through one logger for the whole process (redis.SetLogger),
// with no way to read it back or to set one per client. When a node is
// down it logs every failed dial ("failed to dial after 1 attempts"): for a
// Pool of package pool, a line per command sent to that node, although the
// Pools report outages through their own log policy (redlock's health log,
// pool.Stats). So this package, at its initialisation (before the
// program's own code runs, since pool imports it), installs a logger that
// drops the lines about failed dials that Mark marked, and writes every
// other line as go-redis' default logger does (to stderr, prefixed
// "redis: "). A program that calls redis.SetLogger replaces it, and its
// logger then receives every line, the library's included.
package golog

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"os"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

func init() {
	Out.Store(log.New(os.Stderr, "redis: ", log.LstdFlags))
	redis.SetLogger(logger{})
}

// Out writes the lines the installed logger keeps; tests swap it.
var Out atomic.Pointer[log.Logger]

// logger is the logger this package installs for go-redis.
type logger struct{}

func (logger) Printf(_ context.Context, format string, v ...any) {
	for _, a := range v {
		if err, ok := a.(error); ok && errors.As(err, new(*marked)) {
			return
		}
	}
	_ = Out.Load().Output(2, fmt.Sprintf(format, v...))
}

// Mark returns err (a failed dial of one of the library's connections),
// marked so that go-redis' line about it is dropped. The result matches
// what err matches (errors.Is, errors.As) and has its text.
func Mark(err error) error { return &marked{err} }

// Dialer returns dial, its errors marked (Mark).
func Dialer(dial func(context.Context, string, string) (net.Conn, error)) func(context.Context, string, string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, Mark(err)
		}
		return c, nil
	}
}

type marked struct{ err error }

func (e *marked) Error() string { return e.err.Error() }
func (e *marked) Unwrap() error { return e.err }

// Timeout reports whether the dial timed out, for callers that ask the
// error itself rather than through errors.As, as go-redis does.
func (e *marked) Timeout() bool {
	var t interface{ Timeout() bool }
	return errors.As(e.err, &t) && t.Timeout()
}
