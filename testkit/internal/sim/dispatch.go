package sim

import (
	"cmp"
	"slices"
	"sync"
	"testing/synctest"
)

// dispatcher makes a schedule replay from its seed although the Go
// scheduler runs the goroutines of one virtual instant in any order: the
// commands sent during an instant wait until every goroutine of the
// simulation is blocked (synctest.Wait), then start in an order of their
// own content (client, node, kind, key, token...), never of which
// goroutine sent first, so that each link's generator draws their fates
// in the same order in every replay.
type dispatcher struct {
	mu      sync.Mutex
	pending []*call
	wake    chan struct{}
	done    chan struct{}
	exited  chan struct{}
}

func newDispatcher() *dispatcher {
	return &dispatcher{wake: make(chan struct{}, 1), done: make(chan struct{}), exited: make(chan struct{})}
}

func (d *dispatcher) add(c *call) {
	d.mu.Lock()
	d.pending = append(d.pending, c)
	d.mu.Unlock()
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// run dispatches until stop; it is the only goroutine of its bubble that
// calls synctest.Wait.
func (d *dispatcher) run() {
	defer close(d.exited)
	for {
		select {
		case <-d.wake:
		case <-d.done:
			return
		}
		for {
			synctest.Wait()
			d.mu.Lock()
			batch := d.pending
			d.pending = nil
			d.mu.Unlock()
			if len(batch) == 0 {
				break
			}
			slices.SortStableFunc(batch, order)
			for _, c := range batch {
				c.p.start(c)
			}
		}
	}
}

func (d *dispatcher) stop() {
	close(d.done)
	<-d.exited
}

// order compares two commands sent in the same instant by their content.
func order(a, b *call) int {
	x, y := a.op, b.op
	return cmp.Or(
		cmp.Compare(a.p.client, b.p.client),
		cmp.Compare(a.p.n.id, b.p.n.id),
		cmp.Compare(x.Kind, y.Kind),
		cmp.Compare(x.Key, y.Key),
		cmp.Compare(x.Token, y.Token),
		cmp.Compare(x.TTL, y.TTL),
		cmp.Compare(x.Waiter, y.Waiter),
		cmp.Compare(x.Fence, y.Fence),
		cmp.Compare(len(x.Keys), len(y.Keys)),
		a.deadline.Compare(b.deadline),
	)
}
