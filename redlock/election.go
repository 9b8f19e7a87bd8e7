package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/quorumlock/quorumlock/internal/conf"
)

// ErrNoLeader is matched by the error of Client.Leader when no candidate
// leads: no token is on a quorum of nodes, nor could be on the nodes that did
// not answer.
var ErrNoLeader = errors.New("redlock: no leader")

// Leadership is one leader of an election: the value its Campaign gave and
// its term, the fence of its lock.
type Leadership struct {
	Value string
	Term  uint64
}

// Campaign blocks until the caller leads the election name and returns its
// leadership: a fenced, auto-extended Lock of the key name, acquired like
// Lock with opts, with value as its WithMetadata, which Leader and Observe
// report. Its Fence is the term, above every earlier leader's; Done, Err
// and Context tell when leadership is lost; Release resigns. Its errors are
// Lock's, and before any I/O one for an empty name or a refused value.
func (c *Client) Campaign(ctx context.Context, name, value string, opts ...Option) (*Lock, error) {
	if name == "" {
		return nil, errors.New("redlock: campaign: the election's name is empty")
	}
	return c.Lock(ctx, name, append(opts[:len(opts):len(opts)], WithFencing(true), WithAutoExtend(true), WithMetadata(value), c.ownCounter())...)
}

// ownCounter gives an election's key a fencing counter of its own, which
// only its candidates increment: the term is read back from it (Leader).
// The counter every other key of a master shares moves with them all.
func (c *Client) ownCounter() Option {
	return func(cfg *conf.Config) error {
		cfg.Election, cfg.RetryWait = true, c.untilFree
		return nil
	}
}

// Leader reads who leads the election name: the value and term of the
// candidate whose token is on a quorum of nodes. Once its Campaign has
// returned, the term is its Fence; before, it may be lower, but above every
// earlier leader's. It may report a candidate whose Campaign then fails,
// which never leads; the next leader's term is higher. The error matches
// ErrNoLeader when no candidate leads; ErrUnavailable when too few nodes
// answered, or no quorum of the leader's nodes agreed on its term within the
// node timeout; ctx.Err() too if ctx ended first. It is ErrClosed once Close
// has begun; before any I/O, a plain error for an empty name or bad option.
func (c *Client) Leader(ctx context.Context, name string, opts ...Option) (value string, term uint64, err error) {
	cfg, err := c.electionConfig("leader", name, opts)
	if err != nil {
		return "", 0, err
	}
	lead, _, err := c.lead(ctx, cfg, name)
	return lead.Value, lead.Term, err
}

// electionConfig checks an election's name and applies opts, with the
// election's own fencing counter (ownCounter).
func (c *Client) electionConfig(op, name string, opts []Option) (*conf.Config, error) {
	if name == "" {
		return nil, fmt.Errorf("redlock: %s: the election's name is empty", op)
	}
	cfg, err := conf.Apply(c.cfg, len(c.pools), append(opts[:len(opts):len(opts)], c.ownCounter()))
	if err != nil {
		return nil, err
	}
	if err := checkTag(cfg, name); err != nil {
		return nil, fmt.Errorf("redlock: %s: %w", op, err)
	}
	return cfg, nil
}

// lead is Leader with cfg (electionConfig's), with the leader's token.
func (c *Client) lead(ctx context.Context, cfg *conf.Config, name string) (Leadership, string, error) {
	var begin time.Time
	for {
		in, err := c.inspect(ctx, cfg, name)
		if in == nil {
			return Leadership{}, "", err
		}
		lead, agreed := in.leadership()
		switch {
		case in.State == StateFree:
			return Leadership{}, "", fmt.Errorf("redlock: leader %q: no candidate holds the election on a quorum of nodes: %w", name, ErrNoLeader)
		case in.State == StateUnknown:
			return Leadership{}, "", fmt.Errorf("redlock: leader %q: %d of %d nodes answered, %d needed: %w", name, in.Answered, len(in.Nodes), in.Quorum, errors.Join(ErrUnavailable, err))
		case agreed:
			return lead, in.Holder, nil
		case begin.IsZero():
			begin = time.Now()
		case ctx.Err() != nil || time.Since(begin) > cfg.NodeTimeout:
			return Leadership{}, "", fmt.Errorf("redlock: leader %q: a candidate holds the election, but no quorum of its nodes agrees on its term (its fence write-back has not landed, or some of the nodes it reached do not answer): %w", name, errors.Join(ErrUnavailable, ctx.Err()))
		}
		select { // the leader's fence write-back is on its way
		case <-time.After(time.Millisecond):
		case <-ctx.Done():
		}
	}
}

// leadership is the holder of a held Inspection as a leader, its term the
// fencing counter that a quorum of the nodes holding its token share, and
// whether there is one (docs/safety.md, "Leader election": once the leader's
// fence write-back has landed, exactly its Fence).
func (in *Inspection) leadership() (Leadership, bool) {
	if in.State != StateHeld || in.Holder == "" {
		return Leadership{}, false
	}
	seen := make(map[uint64]int, len(in.Nodes))
	for _, n := range in.Nodes {
		if n.Err == nil && n.Token == in.Holder {
			if seen[n.Fence]++; seen[n.Fence] >= in.Quorum && n.Fence > 0 {
				return Leadership{Value: in.Metadata, Term: n.Fence}, true
			}
		}
	}
	return Leadership{}, false
}

// untilFree shortens delay, a candidate's wait before its next attempt, to
// when the election's key frees on a quorum, as the nodes' TTLs tell: a
// leader that dies without resigning publishes no release, and its
// successor would find out only at its next retry. A live leader renews
// at TTL/3, so its key's TTLs stay above the retry delays and delay stands.
func (c *Client) untilFree(ctx context.Context, cfg *conf.Config, key string, delay time.Duration) time.Duration {
	in, err := c.inspect(ctx, cfg, key)
	if err != nil {
		return delay
	}
	ttls := make([]time.Duration, 0, len(in.Nodes))
	for _, n := range in.Nodes {
		switch {
		case n.Err != nil: // it may stay taken
		case n.Token == "" && len(n.Shared) == 0:
			ttls = append(ttls, 0)
		case n.TTL > 0: // 0: the Pool cannot tell
			ttls = append(ttls, n.TTL)
		}
	}
	if len(ttls) < in.Quorum {
		return delay
	}
	slices.Sort(ttls)
	return min(delay, ttls[in.Quorum-1]+time.Millisecond)
}

// Observe sends each leader of the election name on the returned channel, in
// increasing term order, from the one at the call, if any. A leader lasting
// less than the WithRetryBackoff maximum may go unreported, and a reader
// that falls behind gets only the latest. The channel closes when ctx ends
// or the Client closes, and at once, with the error logged (WithLogger), on
// bad input or a closed Client; Watch returns that error. Options as Leader.
func (c *Client) Observe(ctx context.Context, name string, opts ...Option) <-chan Leadership {
	ch, err := c.Watch(ctx, name, opts...)
	if err != nil {
		c.cfg.Logger.Error(err.Error(), "election", name)
		closed := make(chan Leadership)
		close(closed)
		return closed
	}
	return ch
}

// Watch is Observe that returns its error instead: a nil channel and a plain
// error for an empty name or an invalid option (before any I/O), or
// ErrClosed once Close has begun.
func (c *Client) Watch(ctx context.Context, name string, opts ...Option) (<-chan Leadership, error) {
	cfg, err := c.electionConfig("observe", name, opts)
	if err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancel(ctx)
	if !c.watch(&stop) {
		stop()
		return nil, ErrClosed
	}
	ch := make(chan Leadership, 1)
	go func() {
		defer c.wg.Done()
		defer close(ch)
		defer c.unwatch(&stop)
		c.watchLeader(ctx, cfg, name, ch)
	}()
	return ch, nil
}

// watch registers an Observe loop, which Close ends with stop, and counts
// it in c.wg; it fails once the Client is closed.
func (c *Client) watch(stop *context.CancelFunc) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	if c.watches == nil {
		c.watches = map[*context.CancelFunc]struct{}{}
	}
	c.watches[stop] = struct{}{}
	c.wg.Add(1)
	return true
}

// unwatch forgets an Observe loop that has ended.
func (c *Client) unwatch(stop *context.CancelFunc) {
	c.mu.Lock()
	delete(c.watches, stop)
	c.mu.Unlock()
	(*stop)()
}

// watchLeader is Observe's loop.
func (c *Client) watchLeader(ctx context.Context, cfg *conf.Config, name string, ch chan Leadership) {
	s := newSleeper(c, cfg, c.one(cfg, name))
	defer s.stop()
	var last uint64 // the last leader's term, and its token
	var holder string
	quick := 0 // checks left at the short delay, after a release woke us
	for ctx.Err() == nil {
		if lead, h, err := c.lead(ctx, cfg, name); err == nil && h != holder && lead.Term > last {
			last, holder = lead.Term, h
			select { // replace an unread older leader with this one
			case <-ch:
			default:
			}
			ch <- lead
		}
		delay := cfg.RetryMax
		if s.woken {
			quick = 3
		}
		if quick > 0 {
			quick--
			delay = cfg.RetryDelay(0)
		}
		s.sleep(ctx, delay)
	}
}
