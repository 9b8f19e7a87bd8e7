package qlotel

import (
	"cmp"
	"context"
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/quorumlock/quorumlock/redlock"
)

const schemaURL = semconv.SchemaURL

// Span names.
const (
	spanAcquire = "quorumlock.acquire"
	spanAttempt = "quorumlock.acquire.attempt"
	spanRelease = "quorumlock.release"
	spanRenew   = "quorumlock.renew"
	spanLost    = "quorumlock.lost"
	eventNode   = "quorumlock.node"
)

// failing reports whether a span that came to oc has status Error: a
// refusal (taken) and the caller's own cancellation are outcomes a lock
// expects, and are told by the outcome attribute alone.
func failing(oc outcome) bool {
	return oc != outAcquired && oc != outReleased && oc != outRenewed && oc != outTaken && oc != outCanceled
}

// endCall ends the span of e's acquiring call, which came to oc at now: the
// span its refused attempts opened, or a new one begun at now - e.Waited.
// It returns the span's context, for links from the lock's later spans.
func (o *Observer) endCall(e *redlock.Event, now time.Time, oc outcome) trace.SpanContext {
	begin := now.Add(-e.Waited)
	var span trace.Span
	if c := o.calls.find(e.Call, true); c != nil {
		span = c.span
	}
	if span == nil {
		_, span = o.tracer.Start(orBackground(e.Context), spanAcquire, trace.WithTimestamp(begin))
	}
	if span.IsRecording() {
		span.SetAttributes(keyKey.String(e.Key), keyAttempts.Int(e.Attempts))
		o.roundAttrs(span, e, now, oc)
	}
	sc := span.SpanContext()
	span.End(trace.WithTimestamp(now))
	return sc
}

// attemptSpan makes a span of a refused attempt, which came to oc at now,
// under its call's span (opened here on the call's first refusal).
func (o *Observer) attemptSpan(e *redlock.Event, now time.Time, oc outcome) {
	parent := o.openCall(e, now)
	_, span := o.tracer.Start(parent, spanAttempt, trace.WithTimestamp(now.Add(-e.Took)))
	if span.IsRecording() {
		span.SetAttributes(keyAttempts.Int(e.Attempts))
		o.roundAttrs(span, e, now, oc)
	}
	span.End(trace.WithTimestamp(now))
}

// openCall returns the context of the open span of e's call, starting it
// (at now - e.Waited) if there is none; the caller's context when the call
// cannot be kept open (WithMaxCalls).
func (o *Observer) openCall(e *redlock.Event, now time.Time) context.Context {
	caller := orBackground(e.Context)
	begin := now.Add(-e.Waited)
	if c := o.calls.find(e.Call, false); c != nil {
		return c.ctx
	}
	if e.Call == 0 || !o.calls.reserve() {
		return caller
	}
	ctx, span := o.tracer.Start(caller, spanAcquire, trace.WithTimestamp(begin))
	if !span.IsRecording() {
		o.calls.unreserve()
		return ctx
	}
	o.calls.insert(e.Call, &openCall{ctx: ctx, span: span})
	return ctx
}

// lockSpan makes a span of a held lock's step (release, renewal, loss)
// from start to end, under the caller's span if any, linked to the
// acquiring call's span when known.
func (o *Observer) lockSpan(e *redlock.Event, name string, start, end time.Time, oc outcome, acquire trace.SpanContext) {
	opts := []trace.SpanStartOption{trace.WithTimestamp(start)}
	if acquire.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: acquire}))
	}
	_, span := o.tracer.Start(orBackground(e.Context), name, opts...)
	if span.IsRecording() {
		span.SetAttributes(keyKey.String(e.Key))
		o.roundAttrs(span, e, end, oc)
	}
	span.End(trace.WithTimestamp(end))
}

// roundAttrs sets span's outcome and status, and, when e ran a round over
// the nodes (which ended at end), its quorum, the nodes that agreed, and an
// event per node at the time it answered.
func (o *Observer) roundAttrs(span trace.Span, e *redlock.Event, end time.Time, oc outcome) {
	span.SetAttributes(keyOutcome.String(outcomeNames[oc]))
	if failing(oc) {
		span.SetAttributes(semconv.ErrorTypeKey.String(outcomeNames[oc]))
		msg := outcomeNames[oc]
		if e.Err != nil {
			msg = e.Err.Error()
		}
		span.SetStatus(codes.Error, msg)
	} else if e.Err != nil {
		span.SetAttributes(keyNodeErr.String(e.Err.Error()))
	}
	if e.Nodes == nil {
		return
	}
	span.SetAttributes(keyQuorum.Int(e.Quorum), keyAgreed.Int(e.Agreed()), keyNodes.Int(len(e.Nodes)))
	if oc == outAcquired || oc == outReleased {
		span.SetAttributes(keyDegraded.Bool(e.Degraded()))
	}
	nodeEvents(span, e, end)
}

// nodeEvents adds an event per node of e's round, which ended at end: at
// the time the node answered, in that order, then those that had not.
func nodeEvents(span trace.Span, e *redlock.Event, end time.Time) {
	answered := func(r *redlock.NodeResult) bool { return r.Latency > 0 && r.Outcome != redlock.OutcomePending }
	order := make([]int, len(e.Nodes))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		ra, rb := &e.Nodes[a], &e.Nodes[b]
		switch {
		case answered(ra) && answered(rb):
			return cmp.Compare(ra.Latency, rb.Latency)
		case answered(ra) != answered(rb):
			if answered(ra) {
				return -1
			}
			return 1
		}
		return 0
	})
	start := end.Add(-e.Took)
	for _, i := range order {
		r := &e.Nodes[i]
		at := end
		kv := make([]attribute.KeyValue, 0, 4)
		kv = append(kv, keyNode.String(r.Node), keyOutcome.String(nodeOutcomeNames[nodeOutcome(r.Outcome)]))
		if answered(r) {
			at = start.Add(r.Latency)
			kv = append(kv, keyLatency.Float64(float64(r.Latency.Microseconds())/1000))
		}
		if r.Err != nil {
			kv = append(kv, keyNodeErr.String(r.Err.Error()))
		}
		span.AddEvent(eventNode, trace.WithTimestamp(at), trace.WithAttributes(kv...))
	}
}
