package qlotel_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"

	"github.com/quorumlock/quorumlock/redlock"
)

// TestRenewalsAndLoss: an auto-extended lock's renewals are counted; once
// most nodes are gone, its failed renewals and its loss are spans linked to
// the acquiring span, the loss is counted with its hold time, and the
// Release after it records no second hold time.
func TestRenewalsAndLoss(t *testing.T) {
	// Fencing makes renewals key by key (no renewal session), which the
	// Observer sees.
	e := newEnv(t, 3, redlock.WithTTL(2*time.Second), redlock.WithNodeTimeout(300*time.Millisecond),
		redlock.WithAutoExtend(true), redlock.WithRenewEvery(50*time.Millisecond), redlock.WithFencing(true))
	ctx := context.Background()
	l, err := e.client.Lock(ctx, "renewed") // Lock: a first round slowed by a loaded machine is retried
	if err != nil {
		t.Fatal(err)
	}
	e.tee.wait(t, "extended", 1)
	e.servers[0].Close()
	e.servers[1].Close()
	e.tee.wait(t, "lost", 1)
	<-l.Done()
	if err := l.Release(ctx); !errors.Is(err, redlock.ErrLockLost) && !errors.Is(err, redlock.ErrNotHeld) {
		t.Logf("Release of a lost lock: %v", err)
	}

	rm := e.collect()
	t.Logf("metrics:\n%s", summary(rm))
	if sum(rm, "quorumlock.renewals", outcomeIs("renewed")) < 1 || sum(rm, "quorumlock.renewals", outcomeIs("failed")) < 1 {
		t.Errorf("renewals: want at least one renewed and one failed")
	}
	if got := sum(rm, "quorumlock.losses"); got != 1 {
		t.Errorf("%d losses, want 1", got)
	}
	if n, _, _ := points(rm, "quorumlock.hold.duration", outcomeIs("lost")); n != 1 {
		t.Errorf("%d hold times of lost locks, want 1", n)
	}
	if n, _, _ := points(rm, "quorumlock.hold.duration", outcomeIs("released")); n != 0 {
		t.Errorf("%d hold times of released locks, want 0 (it was lost first)", n)
	}

	spans := e.spans.Ended()
	acq := named(spans, "quorumlock.acquire")
	if len(acq) != 1 {
		t.Fatalf("%d acquire spans, want 1", len(acq))
	}
	for _, name := range []string{"quorumlock.renew", "quorumlock.lost"} {
		got := named(spans, name)
		if len(got) == 0 {
			t.Fatalf("no %s span", name)
		}
		for _, s := range got {
			if len(s.Links()) != 1 || s.Links()[0].SpanContext.SpanID() != acq[0].SpanContext().SpanID() || s.Status().Code != codes.Error || s.Parent().IsValid() {
				t.Fatalf("%s span: links %v, status %v, parent %v: want a root span with status Error, linked to the acquire span", name, s.Links(), s.Status(), s.Parent())
			}
		}
	}
}
