package redlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/quorumlock/quorumlock/internal/conf"
	"github.com/quorumlock/quorumlock/internal/node"
)

// LockState is whether a lock is held, as far as the nodes that answered an
// Inspect tell.
type LockState uint8

const (
	// StateUnknown: too few nodes answered to tell whether a token is on a
	// quorum.
	StateUnknown LockState = iota
	// StateFree: no token is on a quorum, nor could be on the nodes that
	// did not answer.
	StateFree
	// StateHeld: one token is on a quorum of nodes: an exclusive holder's
	// (Inspection.Holder), or shared holders' (Inspection.Shared).
	StateHeld
)

var stateNames = [...]string{"unknown", "free", "held"}

func (s LockState) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("LockState(%d)", s)
}

// Inspection is what Client.Inspect read about one lock: nodes answer at
// different instants and the lock may change meanwhile, so it is a picture
// for people and tools, not proof that a lock is held (Held and Extend are).
type Inspection struct {
	Key      string    // the lock's key as the caller named it
	RedisKey string    // the key on the nodes
	Quorum   int       // nodes that must hold one token for the lock to be held
	State    LockState // held, free, or unknown
	// Holder is the token on a quorum (State held by an exclusive holder;
	// its own part without the metadata), Metadata its holder's
	// description (WithMetadata).
	Holder, Metadata string
	// Shared are the shared holders (Shared) each on a quorum of nodes,
	// ordered by token; State is held when there is one.
	Shared []Holder
	// Agreed is the most nodes that hold one token; Answered the nodes
	// that answered.
	Agreed, Answered int
	// Fence is the highest fencing counter of the key on the nodes that
	// answered: the next fenced holder's token exceeds it.
	Fence uint64
	Nodes []NodeInspection // one per pool, in the order given to New
}

// Holder is one shared holder of a key: its token's own part and its
// description (WithMetadata).
type Holder struct {
	Token, Metadata string
}

// NodeInspection is what one node said about a lock.
type NodeInspection struct {
	Node string // the pool's name
	Err  error  // why the node gave no answer; the other fields are then zero
	// Token is the token that holds the key on the node (its own part,
	// without the metadata), "" when the key is free there; Metadata the
	// holder's description.
	Token, Metadata string
	// Shared are the key's live shared holders on the node (Token is then
	// ""), ordered by token.
	Shared []Holder
	// TTL is how long the key lives on the node (a session lock's: its
	// session key's); 0 when free, or when the Pool cannot tell (a Pool
	// not of package pool).
	TTL time.Duration
	// Fence is the key's fencing counter on the node (0: none yet);
	// BadFence, that a counter there is not an integer (it was changed
	// outside quorumlock, and fenced acquires fail on the node).
	Fence    uint64
	BadFence bool
}

var opInspect = &opSpec{name: "inspect", kind: node.Inspect}

// Inspect reads key on every node, waiting at most the node timeout, and
// changes nothing. It returns the Inspection whenever the nodes were asked,
// even if too few answered (State unknown; each node's Err says why), with
// a nil error or ctx.Err() if ctx ended first. It returns ErrClosed once
// Close has begun, a plain error for an empty key or an invalid option
// (before any I/O), and nil and an error for pools reaching one server or,
// unless a lock of key is held, the name of a Semaphore in use.
func (c *Client) Inspect(ctx context.Context, key string, opts ...Option) (*Inspection, error) {
	cfg, err := c.callConfig("inspect", key, opts)
	if err != nil {
		return nil, err
	}
	in, err := c.inspect(ctx, cfg, key)
	if err != nil || in.State == StateHeld {
		return in, err
	}
	if err := c.semaphoreName(ctx, cfg, key); err != nil {
		return nil, err
	}
	return in, nil
}

// inspect is Inspect with cfg, without the semaphore check.
func (c *Client) inspect(ctx context.Context, cfg *conf.Config, key string) (*Inspection, error) {
	return c.inspectKey(ctx, cfg, key, c.redisKey(cfg, key))
}

// inspectKey is inspect of the Redis key rkey, named key.
func (c *Client) inspectKey(ctx context.Context, cfg *conf.Config, key, rkey string) (*Inspection, error) {
	if err := c.enterRound(ctx, cfg); err != nil {
		return nil, err
	}
	defer c.wg.Done()
	in := &Inspection{Key: key, RedisKey: rkey, Quorum: cfg.QuorumOf(len(c.pools)), Nodes: make([]NodeInspection, len(c.pools))}
	if err := ctx.Err(); err != nil { // ended before any I/O: ask nobody
		for i, r := range c.newResults() {
			in.Nodes[i] = NodeInspection{Node: r.Node, Err: err}
		}
		in.summarise()
		return in, err
	}
	rd := c.run(ctx, cfg, send{spec: opInspect, o: node.Op{Key: rkey, FenceKey: c.fenceKey(cfg, rkey)}})
	defer rd.finish(nil)
	got := make([]bool, len(c.pools))
	for {
		rep, ok := rd.r.Next()
		if !ok {
			break
		}
		got[rep.Node] = true
		in.Nodes[rep.Node] = readInspection(rd.res[rep.Node].Node, rep.Str, rep.Err)
	}
	markUnanswered(rd.res, rd.r.Err(), time.Since(rd.start))
	for i, r := range rd.res {
		if !got[i] { // not asked (its Err says why), or no answer before the round ended
			in.Nodes[i] = NodeInspection{Node: r.Node, Err: cmp.Or(r.Err, errors.New("no answer"))}
		}
	}
	in.summarise()
	return in, callerErr(ctx)
}

// readInspection reads one node's reply to an Inspect.
func readInspection(name, reply string, err error) NodeInspection {
	if err != nil {
		return NodeInspection{Node: name, Err: err}
	}
	r, err := node.ParseInspect(reply)
	if err != nil {
		return NodeInspection{Node: name, Err: err}
	}
	n := NodeInspection{Node: name, TTL: r.TTL}
	n.Token, n.Metadata = node.SplitToken(r.Token)
	for _, t := range r.Shared {
		own, meta := node.SplitToken(t)
		n.Shared = append(n.Shared, Holder{Token: own, Metadata: meta})
	}
	slices.SortFunc(n.Shared, func(a, b Holder) int { return strings.Compare(a.Token, b.Token) })
	for _, f := range []string{r.Fence, r.OldFence} {
		v, err := strconv.ParseUint(f, 10, 64)
		n.BadFence = n.BadFence || f != "" && err != nil
		n.Fence = max(n.Fence, v)
	}
	return n
}

// summarise fills in the summary from the nodes.
func (in *Inspection) summarise() {
	tally := map[string]int{}
	meta := map[string]string{}
	for _, n := range in.Nodes {
		if n.Err != nil {
			continue
		}
		in.Answered++
		in.Fence = max(in.Fence, n.Fence)
		for _, h := range n.Shared {
			if tally[h.Token]++; tally[h.Token] == in.Quorum {
				in.Shared = append(in.Shared, h)
			}
			in.Agreed = max(in.Agreed, tally[h.Token])
		}
		if n.Token == "" {
			continue
		}
		tally[n.Token]++
		meta[n.Token] = n.Metadata
		if tally[n.Token] > in.Agreed {
			in.Agreed = tally[n.Token]
			in.Holder = n.Token
		}
	}
	switch {
	case in.Agreed >= in.Quorum:
		in.State, in.Metadata = StateHeld, meta[in.Holder]
	case in.Agreed+len(in.Nodes)-in.Answered < in.Quorum:
		in.State = StateFree
	}
	if in.State != StateHeld || tally[in.Holder] < in.Quorum {
		in.Holder, in.Metadata = "", ""
	}
	slices.SortFunc(in.Shared, func(a, b Holder) int { return strings.Compare(a.Token, b.Token) })
}
