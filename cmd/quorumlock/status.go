package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	wire "github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/redlock"
)

const statusSynopsis = `usage: quorumlock status [flags] KEY

Show the lock KEY on every Redis master: whether the node answers, the token
that holds KEY there (its first 8 characters), the remaining TTL, and the
key's fencing counter. The last line says whether one token is on a quorum
(the lock is held), on none (it is free), or whether too few nodes answered
to tell. Nothing is changed on the nodes.

Exit status: 0 when a quorum of nodes answered, 2 on bad usage, 5 when too
few nodes answered to tell.
`

// nodeState is what one node says about a lock.
type nodeState struct {
	err   error
	token string        // "" when the key is absent
	ttl   time.Duration // remaining TTL of the key; meaningful when token != ""
	fence string        // the counter, "" when absent
}

// status implements "quorumlock status".
func status(ctx context.Context, e *env, args []string) int {
	fs := newFlagSet("status", statusSynopsis, "")
	var nf nodeFlags
	nf.register(fs, time.Second, "how long each node may take to answer")
	if code, ok := parseFlags(e, fs, args); !ok {
		return code
	}
	switch {
	case fs.NArg() == 0:
		return usageError(e, "status", errNoKey)
	case fs.NArg() > 1:
		return usageError(e, "status", fmt.Errorf("one KEY only, got %d arguments: %q", fs.NArg(), fs.Args()))
	case fs.Arg(0) == "":
		return usageError(e, "status", errors.New("KEY is empty: name the lock"))
	case nf.nodeTimeout <= 0:
		return usageError(e, "status", fmt.Errorf("--node-timeout %v: it must be positive", nf.nodeTimeout))
	}
	key := fs.Arg(0)
	nodes, err := nf.nodes(e.getenv)
	if err != nil {
		return usageError(e, "status", err)
	}
	redis.SetLogger(quiet{})
	rkey := redlock.DefaultKeyPrefix + "{" + key + "}" // see redlock.WithKeyPrefix
	states := make([]nodeState, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() { states[i] = inspect(ctx, n, rkey, nf.nodeTimeout) })
	}
	wg.Wait()

	q := len(nodes)/2 + 1
	fmt.Fprintf(e.stdout, "lock %q (Redis key %s) on %d nodes, quorum %d\n\n", key, rkey, len(nodes), q)
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tREACHABLE\tHOLDER\tTTL\tFENCE")
	reached := 0
	tally := map[string]int{}
	for i, s := range states {
		if s.err != nil {
			fmt.Fprintf(tw, "%s\tno\t-\t-\t-  %v\n", nodes[i].name, s.err)
			continue
		}
		reached++
		holder, ttl, fence := "-", "-", s.fence
		if s.token != "" {
			tally[s.token]++
			holder, ttl = short(s.token), s.ttl.Round(time.Millisecond).String()
		}
		if fence == "" {
			fence = "-"
		}
		fmt.Fprintf(tw, "%s\tyes\t%s\t%s\t%s\n", nodes[i].name, holder, ttl, fence)
	}
	_ = tw.Flush()
	fmt.Fprintln(e.stdout)

	best, bestToken := 0, ""
	for tok, n := range tally {
		if n > best {
			best, bestToken = n, tok
		}
	}
	switch {
	case best >= q:
		fmt.Fprintf(e.stdout, "held: token %s on %d of %d nodes\n", short(bestToken), best, len(nodes))
	case best+len(nodes)-reached < q:
		fmt.Fprintf(e.stdout, "free: no token is on a quorum of %d nodes\n", q)
	default:
		fmt.Fprintf(e.stdout, "unknown: %d of %d nodes answered, too few to tell whether a token is on %d\n", reached, len(nodes), q)
	}
	if reached < q {
		fmt.Fprintf(e.stderr, "quorumlock status: only %d of %d nodes answered, %d needed: check that the nodes marked \"no\" are running and reachable,\nand that --addrs or %s lists them right\n", reached, len(nodes), q, envAddrs)
		return exitUnavailable
	}
	return exitOK
}

// inspect reads the lock key, its TTL and its fencing counter on one node.
func inspect(ctx context.Context, n node, rkey string, timeout time.Duration) nodeState {
	opt := *n.opt
	opt.ContextTimeoutEnabled = true
	opt.MaxRetries = -1
	opt.DialerRetries = 1
	c := redis.NewClient(&opt)
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var get, fence, old *redis.StringCmd
	var pttl *redis.DurationCmd
	_, _ = c.Pipelined(ctx, func(p redis.Pipeliner) error {
		get = p.Get(ctx, rkey)
		pttl = p.PTTL(ctx, rkey)
		fence = p.Get(ctx, redlock.DefaultKeyPrefix+"fence") // shared by all keys
		old = p.Get(ctx, rkey+":fence")                      // the key's own, from earlier versions
		return nil
	})
	for _, cmd := range []redis.Cmder{get, pttl, fence, old} {
		if err := cmd.Err(); err != nil && !errors.Is(err, redis.Nil) {
			return nodeState{err: err}
		}
	}
	s := nodeState{token: get.Val(), ttl: pttl.Val(), fence: fence.Val()}
	if wire.HandedValue(s.token) { // handed to a waiter, which has not taken it yet: free
		s.token, s.ttl = "", 0
	}
	if tok, inc, sk, ok := wire.ParseSession(rkey, s.token); ok {
		var err error
		if s.token, s.ttl, err = sessionState(ctx, c, tok, inc, sk); err != nil {
			return nodeState{err: err}
		}
	}
	if o, err := strconv.ParseUint(old.Val(), 10, 64); err == nil {
		if f, err := strconv.ParseUint(s.fence, 10, 64); err != nil || o > f {
			s.fence = old.Val() // the key's next token is above it
		}
	}
	if s.fence != "" {
		if _, err := strconv.ParseUint(s.fence, 10, 64); err != nil {
			s.fence += " (not a counter)"
		}
	}
	return s
}

// sessionState is a session lock's holder and TTL on one node: its token and
// its session key's TTL while that key holds the incarnation the lock names,
// else none (the lock is free: docs/safety.md, "Renewal sessions").
func sessionState(ctx context.Context, c *redis.Client, token, inc, sessionKey string) (string, time.Duration, error) {
	var get *redis.StringCmd
	var pttl *redis.DurationCmd
	_, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		get = p.Get(ctx, sessionKey)
		pttl = p.PTTL(ctx, sessionKey)
		return nil
	})
	switch {
	case err != nil && !errors.Is(err, redis.Nil):
		return "", 0, err
	case get.Val() != inc:
		return "", 0, nil
	}
	return token, pttl.Val(), nil
}

// short is the first 8 characters of a token: enough to tell holders apart.
func short(token string) string {
	if len(token) > 8 {
		return token[:8]
	}
	return token
}
