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
// context deadlines. Close ends a setup in progress at once on a Pool made
// by Dial or DialURL, and otherwise waits for it at most setup. A setup
// that is not positive counts as retryMax. Closing the Pool does not close
// subscriptions: their owner (a redlock.Client) does.
func (p *redisPool) Subscribe(h node.Handler, setup time.Duration) node.Subscription {
	if setup <= 0 {
		setup = retryMax // a read bounded by 0 would spin
	}
	s := &subscription{h: h, setup: setup}
	s.life, s.stop = context.WithCancel(context.WithValue(context.Background(), subscriptionKey{}, s))
	s.ps = p.c.Subscribe(s.life) // no channel: no I/O
	s.wg.Go(s.receive)
	return s
}

type subscription struct {
	ps    *redis.PubSub
	h     node.Handler
	setup time.Duration
	// life is the context of every call on ps: it carries the subscription
	// to the dial hook and ends at Close, cancelling a dial in progress.
	life context.Context
	stop context.CancelFunc
	once sync.Once
	wg   sync.WaitGroup // the receive goroutine

	mu   sync.Mutex
	conn net.Conn // the last connection dialled for ps (by dialHook)
}

// subscriptionKey is the context key under which a subscription's calls
// carry it, for dialHook.
type subscriptionKey struct{}

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
			switch m := msg.(type) {
			case *redis.Message:
				s.h.Published(m.Channel, m.Payload)
			case *redis.Subscription:
				if m.Kind == "subscribe" {
					s.h.Subscribed(m.Channel)
				}
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

// Add subscribes to channels, within ctx. After a failure the channels are
// still subscribed to when the subscription next connects.
func (s *subscription) Add(ctx context.Context, channels ...string) error {
	ctx, cancel := s.scope(ctx)
	defer cancel()
	return s.ps.Subscribe(ctx, channels...)
}

// Remove unsubscribes from channels, within ctx.
func (s *subscription) Remove(ctx context.Context, channels ...string) error {
	ctx, cancel := s.scope(ctx)
	defer cancel()
	return s.ps.Unsubscribe(ctx, channels...)
}

// scope returns ctx carrying the subscription (for dialHook) and ending at
// Close too.
func (s *subscription) scope(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.WithValue(ctx, subscriptionKey{}, s))
	stop := context.AfterFunc(s.life, cancel)
	return ctx, func() { stop(); cancel() }
}

// Close ends the subscription and joins its goroutine. It closes the
// connection last dialled for it first, so that a setup in progress fails
// at once instead of holding the PubSub (whose Close waits for it) until
// its budget ends. Calling it again returns nil.
func (s *subscription) Close() error {
	var err error
	s.once.Do(func() {
		s.stop() // before s.mu: dial refuses from here on
		s.mu.Lock()
		conn := s.conn
		s.conn = nil
		s.mu.Unlock()
		if conn != nil {
			_ = conn.Close()
		}
		err = s.ps.Close()
	})
	s.wg.Wait()
	return err
}

// dial runs next for one of the subscription's connections and keeps the
// connection for Close; once closed, it refuses.
func (s *subscription) dial(ctx context.Context, next redis.DialHook, network, addr string) (net.Conn, error) {
	conn, err := next(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.life.Err() != nil {
		_ = conn.Close()
		return nil, net.ErrClosed
	}
	s.conn = conn
	return conn, nil
}

// dialHook is installed on the clients that Dial makes: it hands the
// connections dialled for a subscription (a dial whose context carries one)
// to it, so that closing the subscription can end their setup. Other dials
// and all commands pass through untouched.
type dialHook struct{}

var _ redis.Hook = dialHook{}

func (dialHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if s, ok := ctx.Value(subscriptionKey{}).(*subscription); ok {
			return s.dial(ctx, next, network, addr)
		}
		return next(ctx, network, addr)
	}
}

func (dialHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (dialHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
