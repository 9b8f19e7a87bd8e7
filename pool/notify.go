package pool

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/internal/node"
)

var _ node.Subscriber = (*redisPool)(nil)

// Subscribe opens a subscription for release notifications on this node
// (see node.Subscriber); it is safe for concurrent use. Its goroutine
// connects at once; each connection setup (dial, HELLO, the restart guard's
// INFO) gets setup at most, on a Pool from New as far as its client honours
// context deadlines, and Close waits for one in progress at most that long.
// A setup that is not positive counts as retryMax. Closing the Pool does
// not close subscriptions: their owner (a redlock.Client) does.
func (p *redisPool) Subscribe(notify func(channel, message string), setup time.Duration) node.Subscription {
	if setup <= 0 {
		setup = retryMax // a read bounded by 0 would spin
	}
	s := &subscription{notify: notify, setup: setup}
	s.life, s.stop = context.WithCancel(context.Background())
	s.ps = p.c.Subscribe(s.life) // no channel: no I/O
	s.wg.Go(s.receive)
	return s
}

type subscription struct {
	ps     *redis.PubSub
	notify func(channel, message string)
	setup  time.Duration
	// life is the context of the receive goroutine's calls on ps: it ends
	// at Close, cancelling a dial in progress.
	life context.Context
	stop context.CancelFunc
	once sync.Once
	wg   sync.WaitGroup // the receive goroutine
}

// retryFirst and retryMax pace the reads of a subscription whose node
// fails (go-redis reconnects and resubscribes on the next read): the pause
// doubles from retryFirst to retryMax while the node stays down. A setup
// that timed out after using up its budget is retried without a pause.
// Waiters poll meanwhile.
const (
	retryFirst = 100 * time.Millisecond
	retryMax   = 2 * time.Second
)

func (s *subscription) receive() {
	t := time.NewTimer(0)
	<-t.C
	defer t.Stop()
	pause := retryFirst
	for s.life.Err() == nil {
		start := time.Now()
		msg, err := s.next()
		switch {
		case err == nil:
			pause = retryFirst
			if m, ok := msg.(*redis.Message); ok {
				s.notify(m.Channel, m.Payload)
			}
		case timedOut(err) && time.Since(start) >= s.setup/2:
			// An idle connection, or a setup that used up its budget:
			// paced by the budget already.
		default:
			t.Reset(pause)
			pause = min(2*pause, retryMax)
			select {
			case <-s.life.Done():
				return
			case <-t.C:
			}
		}
	}
}

// next reads the next message, connecting first if there is no connection
// (go-redis also reconnects within the call when the read fails). The call
// is bounded by s.setup: a read that times out leaves a healthy connection
// in place, a setup that times out drops its connection.
func (s *subscription) next() (any, error) {
	ctx, cancel := context.WithTimeout(s.life, s.setup)
	defer cancel()
	return s.ps.ReceiveTimeout(ctx, s.setup)
}

// timedOut reports a network timeout or an expired context.
func timedOut(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

func (s *subscription) Add(ctx context.Context, channels ...string) error {
	return s.ps.Subscribe(ctx, channels...)
}

func (s *subscription) Remove(ctx context.Context, channels ...string) error {
	return s.ps.Unsubscribe(ctx, channels...)
}

// Close ends the subscription and joins its goroutine. A setup in
// progress holds the PubSub (whose Close waits for it) until it ends, at
// most its budget. Calling it again returns nil.
func (s *subscription) Close() error {
	var err error
	s.once.Do(func() {
		s.stop()
		err = s.ps.Close()
	})
	s.wg.Wait()
	return err
}
