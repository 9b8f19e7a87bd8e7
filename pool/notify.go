package pool

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/internal/node"
)

var _ node.Subscriber = (*redisPool)(nil)

// Subscribe opens a subscription for release notifications on this node
// (see node.Subscriber); it is safe for concurrent use and does no I/O until
// channels are added. Closing the Pool does not close subscriptions: their
// owner (a redlock.Client) does.
func (p *redisPool) Subscribe(notify func(channel, message string)) node.Subscription {
	s := &subscription{ps: p.c.Subscribe(context.Background()), notify: notify, done: make(chan struct{})}
	s.wg.Go(s.receive)
	return s
}

type subscription struct {
	ps     *redis.PubSub
	notify func(channel, message string)
	done   chan struct{}
	once   sync.Once
	wg     sync.WaitGroup
}

// retryFirst and retryMax pace the reads of a subscription whose node
// fails (go-redis reconnects and resubscribes on the next read): the pause
// doubles from retryFirst to retryMax while the node stays down. Waiters
// poll meanwhile.
const (
	retryFirst = 100 * time.Millisecond
	retryMax   = 2 * time.Second
)

func (s *subscription) receive() {
	t := time.NewTimer(0)
	<-t.C
	defer t.Stop()
	pause := retryFirst
	for {
		msg, err := s.ps.Receive(context.Background())
		if err != nil {
			t.Reset(pause)
			pause = min(2*pause, retryMax)
			select {
			case <-s.done:
				return
			case <-t.C:
			}
			continue
		}
		pause = retryFirst
		if m, ok := msg.(*redis.Message); ok {
			s.notify(m.Channel, m.Payload)
		}
	}
}

func (s *subscription) Add(ctx context.Context, channels ...string) error {
	return s.ps.Subscribe(ctx, channels...)
}

func (s *subscription) Remove(ctx context.Context, channels ...string) error {
	return s.ps.Unsubscribe(ctx, channels...)
}

func (s *subscription) Close() error {
	var err error
	s.once.Do(func() {
		close(s.done)
		err = s.ps.Close()
	})
	s.wg.Wait()
	return err
}
