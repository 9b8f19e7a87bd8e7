package qlotel

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/quorumlock/quorumlock/redlock"
)

// Observer implements redlock.Observer with OpenTelemetry spans and
// metrics (package doc, docs/observability.md). Pass it to a Client with
// redlock.WithObserver; one Observer may serve many Clients. Its methods
// do not block on I/O, allocate little beyond the spans they make, and are
// safe for concurrent use.
type Observer struct {
	tracer trace.Tracer
	in     *instruments
	holds  *holds
	calls  *calls
}

var _ redlock.Observer = (*Observer)(nil)

// NewObserver returns an Observer that sends spans to the TracerProvider
// and metrics to the MeterProvider the options name (default: the global
// ones, as they are now). It fails only on a bad option or when the
// MeterProvider refuses to create an instrument; it sends nothing before
// it is used.
func NewObserver(opts ...Option) (*Observer, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	in, err := newInstruments(cfg.meters.Meter(ScopeName, metric.WithSchemaURL(schemaURL)))
	if err != nil {
		return nil, err
	}
	return &Observer{
		tracer: cfg.tracers.Tracer(ScopeName, trace.WithSchemaURL(schemaURL)),
		in:     in,
		holds:  newHolds(cfg.maxHolds),
		calls:  newCalls(cfg.maxCalls),
	}, nil
}

// Acquired records a won acquiring call: its attempt, its whole time, its
// round, a degraded win, the start of its hold time, and the call's span.
func (o *Observer) Acquired(e redlock.Event) {
	now := time.Now()
	ctx := orBackground(e.Context)
	o.in.attempts.Add(ctx, 1, o.in.byOutcome[outAcquired].add...)
	o.in.acquireDur.Record(ctx, e.Waited.Seconds(), o.in.byOutcome[outAcquired].rec...)
	if e.Nodes != nil {
		o.in.round(ctx, opAcquire, outAcquired, &e)
	}
	if e.Degraded() {
		o.in.degraded.Add(ctx, 1, o.in.none.add...)
	}
	sc := o.endCall(&e, now, outAcquired)
	o.holds.add(e.Token, hold{start: now, deadline: e.Deadline, acquire: sc})
}

// Contended records a refused attempt of a waiting call: the attempt, its
// round, and a span of the attempt under the call's span, which it starts
// (and keeps open until the call ends) on the call's first refusal.
func (o *Observer) Contended(e redlock.Event) {
	now := time.Now()
	ctx := orBackground(e.Context)
	oc := acquireOutcome(e.Err)
	o.in.attempts.Add(ctx, 1, o.in.byOutcome[oc].add...)
	if e.Nodes != nil {
		o.in.round(ctx, opAcquire, oc, &e)
	}
	o.attemptSpan(&e, now, oc)
}

// AcquireFailed records an acquiring call that returns an error: its whole
// time, its last round and attempt if no Contended event reported them
// (e.Nodes is then set), and the call's span.
func (o *Observer) AcquireFailed(e redlock.Event) {
	now := time.Now()
	ctx := orBackground(e.Context)
	oc := acquireOutcome(e.Err)
	o.in.acquireDur.Record(ctx, e.Waited.Seconds(), o.in.byOutcome[oc].rec...)
	if e.Nodes != nil {
		o.in.attempts.Add(ctx, 1, o.in.byOutcome[oc].add...)
		o.in.round(ctx, opAcquire, oc, &e)
	}
	o.endCall(&e, now, oc)
}

// Extended records a successful automatic renewal (no span).
func (o *Observer) Extended(e redlock.Event) {
	ctx := context.Background()
	o.in.renewals.Add(ctx, 1, o.in.byOutcome[outRenewed].add...)
	o.in.roundDur.Record(ctx, e.Took.Seconds(), o.in.byOpOutcome[opRenew][outRenewed].rec...)
	o.holds.extend(e.Token, e.Deadline)
}

// ExtendFailed records a failed automatic renewal, with a span
// "quorumlock.renew" linked to the acquiring call's span.
func (o *Observer) ExtendFailed(e redlock.Event) {
	now := time.Now()
	ctx := context.Background()
	o.in.renewals.Add(ctx, 1, o.in.byOutcome[outFailed].add...)
	o.in.roundDur.Record(ctx, e.Took.Seconds(), o.in.byOpOutcome[opRenew][outFailed].rec...)
	h, _ := o.holds.get(e.Token)
	o.lockSpan(&e, spanRenew, now.Add(-e.Took), now, outFailed, h.acquire)
}

// Lost records a lost lock: the loss, its hold time, and a span
// "quorumlock.lost" (of no length) linked to the acquiring call's span.
func (o *Observer) Lost(e redlock.Event) {
	now := time.Now()
	ctx := context.Background()
	o.in.losses.Add(ctx, 1, o.in.none.add...)
	h, ok := o.holds.take(e.Token)
	if ok {
		o.in.holdDur.Record(ctx, now.Sub(h.start).Seconds(), o.in.byOutcome[outLost].rec...)
	}
	o.lockSpan(&e, spanLost, now, now, outLost, h.acquire)
}

// Released records a Release (or Close): its round, the lock's hold time,
// and a span "quorumlock.release" under the caller's span.
func (o *Observer) Released(e redlock.Event) {
	now := time.Now()
	ctx := orBackground(e.Context)
	oc := releaseOutcome(e.Err)
	if e.Nodes != nil {
		o.in.round(ctx, opRelease, oc, &e)
	}
	h, ok := o.holds.take(e.Token)
	if ok {
		o.in.holdDur.Record(ctx, now.Sub(h.start).Seconds(), o.in.byOutcome[outReleased].rec...)
	}
	o.lockSpan(&e, spanRelease, now.Add(-e.Took), now, oc, h.acquire)
}

func orBackground(ctx context.Context) context.Context {
	if ctx == nil {
		return context.Background()
	}
	return ctx
}
