package qlotel

import (
	"errors"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of the Tracer and Meter this
// package takes from the providers.
const ScopeName = "github.com/quorumlock/quorumlock/otel"

// Option configures NewObserver and NewHook.
type Option func(*config) error

type config struct {
	tracers   trace.TracerProvider
	meters    metric.MeterProvider
	maxHolds  int  // NewObserver: locks whose hold time is tracked at once
	maxCalls  int  // NewObserver: waiting calls whose span is kept open at once
	rootSpans bool // NewHook: spans also for commands sent without a parent span
}

func newConfig(opts []Option) (*config, error) {
	c := &config{maxHolds: DefaultMaxHolds, maxCalls: DefaultMaxCalls}
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("qlotel: an Option is nil")
		}
		if err := o(c); err != nil {
			return nil, err
		}
	}
	if c.tracers == nil {
		c.tracers = otel.GetTracerProvider()
	}
	if c.meters == nil {
		c.meters = otel.GetMeterProvider()
	}
	return c, nil
}

// WithTracerProvider sets where spans go (default: the global provider,
// otel.GetTracerProvider, as it is when NewObserver or NewHook is called).
// A nil provider is an error.
func WithTracerProvider(p trace.TracerProvider) Option {
	return func(c *config) error {
		if p == nil {
			return errors.New("qlotel: WithTracerProvider: the provider is nil")
		}
		c.tracers = p
		return nil
	}
}

// WithMeterProvider sets where metrics go (default: the global provider,
// otel.GetMeterProvider, as it is when NewObserver is called). A nil
// provider is an error. NewHook records no metrics and ignores it.
func WithMeterProvider(p metric.MeterProvider) Option {
	return func(c *config) error {
		if p == nil {
			return errors.New("qlotel: WithMeterProvider: the provider is nil")
		}
		c.meters = p
		return nil
	}
}

// DefaultMaxHolds is the default of WithMaxHolds.
const DefaultMaxHolds = 1 << 16

// WithMaxHolds bounds the locks whose hold time the Observer tracks at
// once (default DefaultMaxHolds); n must be positive. A lock is tracked
// from Acquired until Released or Lost, a few dozen bytes each. When the
// bound is reached, locks whose deadline passed more than a minute ago (left
// to expire, never released) are forgotten first; if none is, a new lock's
// hold time is not recorded.
func WithMaxHolds(n int) Option {
	return func(c *config) error {
		if n <= 0 {
			return errors.New("qlotel: WithMaxHolds: the bound must be positive")
		}
		c.maxHolds = n
		return nil
	}
}

// DefaultMaxCalls is the default of WithMaxCalls.
const DefaultMaxCalls = 4096

// WithMaxCalls bounds the waiting calls (Lock and the other calls that
// retry) whose span the Observer keeps open at once (default
// DefaultMaxCalls); n must be positive. Beyond it, a waiting call's refused
// attempts become spans of the caller's span rather than of the call's.
func WithMaxCalls(n int) Option {
	return func(c *config) error {
		if n <= 0 {
			return errors.New("qlotel: WithMaxCalls: the bound must be positive")
		}
		c.maxCalls = n
		return nil
	}
}

// WithRootSpans makes Hook start a span also for a command whose context
// carries no span (default: only under a span, so that commands the Client
// sends on its own, such as renewals, do not each start a trace). The
// Observer ignores it.
func WithRootSpans() Option {
	return func(c *config) error {
		c.rootSpans = true
		return nil
	}
}
