// Package qlotel reports the locks of a quorumlock redlock.Client to
// OpenTelemetry: an Observer (redlock.WithObserver) turns every lock's life
// into spans and metrics, and Hook (pool.WithHooks, or AddHook on a go-redis
// client you own) makes a span per Redis command or pipeline that the
// lock commands send.
//
// The package lives in its own module, github.com/quorumlock/quorumlock/otel,
// so that a program importing only redlock and pool never has OpenTelemetry
// in its module graph. It is named qlotel, not otel, so that it can be
// imported beside go.opentelemetry.io/otel without renaming either.
//
// Spans: an acquiring call (TryLock, Lock, TryAcquire, ...) is one span,
// "quorumlock.acquire", that starts when the call began and ends when it
// returns, a child of the span in the caller's context; each refused
// attempt of a waiting call is a child span "quorumlock.acquire.attempt"
// with its round's own start and end; the nodes' answers are span events at
// the time each came. Release is a span "quorumlock.release"; a failed
// automatic renewal ("quorumlock.renew") and a loss ("quorumlock.lost") are
// spans of their own, linked to the acquiring span. Metric names, units and
// attributes are listed in docs/observability.md.
//
// The Observer's methods never block on I/O: they update in-memory
// instruments and start or end spans, and the exporters configured in the
// providers do the rest. Every type of this package is safe for concurrent
// use.
package qlotel
