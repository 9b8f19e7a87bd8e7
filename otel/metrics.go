package qlotel

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/quorumlock/quorumlock/redlock"
)

// Attribute keys of the metrics and spans (docs/observability.md).
const (
	keyOutcome   = attribute.Key("quorumlock.outcome")
	keyOperation = attribute.Key("quorumlock.operation")
	keyNode      = attribute.Key("quorumlock.node")
	keyKey       = attribute.Key("quorumlock.key")
	keyAttempts  = attribute.Key("quorumlock.attempts")
	keyQuorum    = attribute.Key("quorumlock.quorum")
	keyAgreed    = attribute.Key("quorumlock.agreed")
	keyNodes     = attribute.Key("quorumlock.nodes")
	keyDegraded  = attribute.Key("quorumlock.degraded")
	keyLatency   = attribute.Key("quorumlock.latency_ms")
	keyNodeErr   = attribute.Key("quorumlock.error")
)

// outcome is what an operation came to, as the outcome attribute says it.
type outcome uint8

const (
	outAcquired outcome = iota
	outTaken
	outUnavailable
	outCanceled
	outError
	outReleased
	outNotHeld
	outRenewed
	outFailed
	outLost
	nOutcomes
)

var outcomeNames = [nOutcomes]string{"acquired", "taken", "unavailable", "canceled", "error", "released", "not_held", "renewed", "failed", "lost"}

// op is the operation a round ran.
type op uint8

const (
	opAcquire op = iota
	opRelease
	opRenew
	nOps
)

var opNames = [nOps]string{"acquire", "release", "renew"}

// nodeOutcomeNames names redlock.Outcome values (by value) for attributes;
// values this package does not know are "unknown", the last entry.
var nodeOutcomeNames = [...]string{"pending", "ok", "taken", "not_held", "error", "timeout", "not_asked", "unknown"}

const nNodeOutcomes = len(nodeOutcomeNames)

// errType is a node failure's error.type.
type errType uint8

const (
	errError errType = iota
	errTimeout
	errNotAsked
	nErrTypes
)

var errTypeNames = [nErrTypes]string{"error", "timeout", "not_asked"}

func nodeOutcome(o redlock.Outcome) int { return min(int(o), nNodeOutcomes-1) }

// acquireOutcome classifies an acquiring call's (or attempt's) error.
func acquireOutcome(err error) outcome {
	switch {
	case err == nil:
		return outAcquired
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return outCanceled
	case errors.Is(err, redlock.ErrUnavailable):
		return outUnavailable
	case errors.Is(err, redlock.ErrNotAcquired):
		return outTaken
	}
	return outError
}

// releaseOutcome classifies Release's error.
func releaseOutcome(err error) outcome {
	switch {
	case err == nil:
		return outReleased
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return outCanceled
	case errors.Is(err, redlock.ErrUnavailable):
		return outUnavailable
	case errors.Is(err, redlock.ErrNotHeld), errors.Is(err, redlock.ErrReleased), errors.Is(err, redlock.ErrLockLost):
		return outNotHeld
	}
	return outError
}

// attrs is one precomputed attribute set, as the options the instruments
// take: passing a prebuilt slice spares an allocation per measurement.
type attrs struct {
	add []metric.AddOption
	rec []metric.RecordOption
}

func newAttrs(kv ...attribute.KeyValue) attrs {
	o := metric.WithAttributeSet(attribute.NewSet(kv...))
	return attrs{add: []metric.AddOption{o}, rec: []metric.RecordOption{o}}
}

// nodeAttrs are one node's attribute sets.
type nodeAttrs struct {
	dur  [nOps][nNodeOutcomes]attrs // node.duration: node, operation, outcome
	errs [nOps][nErrTypes]attrs     // node.errors: node, operation, error.type
}

func newNodeAttrs(name string) *nodeAttrs {
	na := &nodeAttrs{}
	n := keyNode.String(name)
	for o := range nOps {
		for i, s := range nodeOutcomeNames {
			na.dur[o][i] = newAttrs(n, keyOperation.String(opNames[o]), keyOutcome.String(s))
		}
		for t := range nErrTypes {
			na.errs[o][t] = newAttrs(n, keyOperation.String(opNames[o]), semconv.ErrorTypeKey.String(errTypeNames[t]))
		}
	}
	return na
}

// instruments are the Observer's metrics and their attribute sets.
type instruments struct {
	attempts, degraded, renewals, losses, nodeErrs metric.Int64Counter
	acquireDur, holdDur, roundDur, nodeDur         metric.Float64Histogram
	agreed, spare                                  metric.Int64Histogram

	byOutcome   [nOutcomes]attrs
	byOpOutcome [nOps][nOutcomes]attrs
	byOp        [nOps]attrs
	none        attrs

	mu    sync.Mutex                            // serialises additions to nodes
	nodes atomic.Pointer[map[string]*nodeAttrs] // copied on write
}

// Histogram bucket boundaries, in seconds or nodes.
var (
	nodeBuckets  = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}
	roundBuckets = nodeBuckets
	waitBuckets  = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}
	holdBuckets  = []float64{0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600, 14400, 86400}
	countBuckets = []float64{-1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 15}
)

func newInstruments(m metric.Meter) (*instruments, error) {
	in := &instruments{}
	var errs []error
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	hist := func(name, desc string, b []float64) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc), metric.WithExplicitBucketBoundaries(b...))
		errs = append(errs, err)
		return h
	}
	nodes := func(name, desc string) metric.Int64Histogram {
		h, err := m.Int64Histogram(name, metric.WithUnit("{node}"), metric.WithDescription(desc), metric.WithExplicitBucketBoundaries(countBuckets...))
		errs = append(errs, err)
		return h
	}
	in.attempts = counter("quorumlock.acquire.attempts", "{attempt}", "Attempts of acquiring calls, by outcome: acquired, taken, unavailable, canceled, error.")
	in.acquireDur = hist("quorumlock.acquire.duration", "Time an acquiring call took until it returned, waiting included, by outcome.", waitBuckets)
	in.degraded = counter("quorumlock.acquire.degraded", "{acquisition}", "Locks acquired while some node failed, timed out, was not asked or held another token.")
	in.holdDur = hist("quorumlock.hold.duration", "Time a lock was held, from acquired to released or lost, by outcome.", holdBuckets)
	in.renewals = counter("quorumlock.renewals", "{renewal}", "Automatic renewals, by outcome: renewed, failed.")
	in.losses = counter("quorumlock.losses", "{lock}", "Locks lost: validity ran out or the nodes no longer hold the token.")
	in.roundDur = hist("quorumlock.round.duration", "Time of one round over the nodes, by operation and outcome.", roundBuckets)
	in.nodeDur = hist("quorumlock.node.duration", "Time from a round's start to one node's answer, by node, operation and the node's outcome.", nodeBuckets)
	in.nodeErrs = counter("quorumlock.node.errors", "{error}", "Node failures in rounds, by node, operation and error.type: error, timeout, not_asked.")
	in.agreed = nodes("quorumlock.round.agreed", "Nodes that did what a round asked, by operation (a round decided early counts only the answers it saw).")
	in.spare = nodes("quorumlock.round.spare", "Nodes a round could still have lost and reached its quorum: nodes - failed - quorum; negative when unavailable.")
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("qlotel: creating the instruments: %w", err)
	}
	in.precompute()
	return in, nil
}

// precompute builds the attribute sets of every outcome and operation.
func (in *instruments) precompute() {
	for o := range nOutcomes {
		in.byOutcome[o] = newAttrs(keyOutcome.String(outcomeNames[o]))
		for p := range nOps {
			in.byOpOutcome[p][o] = newAttrs(keyOperation.String(opNames[p]), keyOutcome.String(outcomeNames[o]))
		}
	}
	for p := range nOps {
		in.byOp[p] = newAttrs(keyOperation.String(opNames[p]))
	}
	in.none = newAttrs()
	in.nodes.Store(&map[string]*nodeAttrs{})
}

// node returns the attribute sets of the node named name, made on its
// first use (node names are the pools' and do not change).
func (in *instruments) node(name string) *nodeAttrs {
	if na, ok := (*in.nodes.Load())[name]; ok {
		return na
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	old := *in.nodes.Load()
	if na, ok := old[name]; ok {
		return na
	}
	m := make(map[string]*nodeAttrs, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	na := newNodeAttrs(name)
	m[name] = na
	in.nodes.Store(&m)
	return na
}

// round records a round of operation p that came to oc: its time and, when
// it ran over the nodes, each node's latency and failure, the nodes that
// agreed and the nodes to spare.
func (in *instruments) round(ctx context.Context, p op, oc outcome, e *redlock.Event) {
	in.roundDur.Record(ctx, e.Took.Seconds(), in.byOpOutcome[p][oc].rec...)
	if e.Nodes == nil {
		return
	}
	agreed, failed := 0, 0
	for i := range e.Nodes {
		r := &e.Nodes[i]
		na := in.node(r.Node)
		switch r.Outcome {
		case redlock.OutcomeOK:
			agreed++
		case redlock.OutcomeError:
			failed++
			in.nodeErrs.Add(ctx, 1, na.errs[p][errError].add...)
		case redlock.OutcomeTimeout:
			failed++
			in.nodeErrs.Add(ctx, 1, na.errs[p][errTimeout].add...)
		case redlock.OutcomeNotAsked:
			failed++
			in.nodeErrs.Add(ctx, 1, na.errs[p][errNotAsked].add...)
		}
		if r.Latency > 0 && r.Outcome != redlock.OutcomePending {
			in.nodeDur.Record(ctx, r.Latency.Seconds(), na.dur[p][nodeOutcome(r.Outcome)].rec...)
		}
	}
	in.agreed.Record(ctx, int64(agreed), in.byOp[p].rec...)
	in.spare.Record(ctx, int64(len(e.Nodes)-failed-e.Quorum), in.byOp[p].rec...)
}
