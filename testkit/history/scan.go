package history

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/redlock"
)

// Scan is the end-of-run scan (L1, L2): it reads every lock key under
// prefix (redlock.DefaultKeyPrefix when empty) on each node, nodes[i] being
// node i, and records what it found with AddLeftovers, one call per node
// (an empty node included). Fencing counters, the session sequence and the
// waiters' lines are not lock keys and are skipped. Call it after every
// Client was closed (Close waits for its clean-up) and every fault healed.
// It returns the first error reading a node, naming the node; the nodes read
// before it are recorded, that one and the later ones are not.
func (h *History) Scan(ctx context.Context, nodes []*redis.Client, prefix string) error {
	if prefix == "" {
		prefix = redlock.DefaultKeyPrefix
	}
	for i, cl := range nodes {
		keys, err := lockKeys(ctx, cl, prefix)
		if err == nil {
			var found []Leftover
			found, err = ReadLeftovers(ctx, cl, i, keys, h.Now())
			h.AddLeftovers(found...)
		}
		if err != nil {
			return fmt.Errorf("history: scanning node%d: %w", i, err)
		}
	}
	return nil
}

// lockKeys lists the lock keys under prefix on one node.
func lockKeys(ctx context.Context, cl *redis.Client, prefix string) ([]string, error) {
	var keys []string
	iter := cl.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		if k := iter.Val(); LockKey(prefix, k) {
			keys = append(keys, k)
		}
	}
	return keys, iter.Err()
}

// ReadLeftovers reads the given lock keys (Redis key names) on node n
// through cl and returns those that exist, with their tokens and PTTLs
// and, for a session lock, its session key's state; at is the time of the
// reading on the History's clock. A sweep during a run records its result
// with AddSweep. On an error it returns nil and the error.
func ReadLeftovers(ctx context.Context, cl *redis.Client, n int, keys []string, at time.Duration) ([]Leftover, error) {
	vals, pttls, err := GetPTTLs(ctx, cl, keys)
	if err != nil {
		return nil, err
	}
	var found []Leftover
	for j, k := range keys {
		if vals[j] != "" {
			found = append(found, Leftover{Node: n, Key: k, Token: vals[j], PTTL: pttls[j], At: at})
		}
	}
	if err := addSessionState(ctx, cl, found); err != nil {
		return nil, err
	}
	return found, nil
}

// GetPTTLs reads the value ("" when absent) and PTTL (ms; -2 absent, -1
// none) of each key in one transaction, so that they agree.
func GetPTTLs(ctx context.Context, cl *redis.Client, keys []string) (vals []string, pttls []int64, err error) {
	gets := make([]*redis.StringCmd, len(keys))
	ttls := make([]*redis.Cmd, len(keys))
	_, err = cl.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for j, k := range keys {
			gets[j] = p.Get(ctx, k)
			ttls[j] = p.Do(ctx, "PTTL", k)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, nil, err
	}
	vals, pttls = make([]string, len(keys)), make([]int64, len(keys))
	for j := range keys {
		vals[j] = gets[j].Val()
		pttls[j], _ = ttls[j].Int64()
	}
	return vals, pttls, nil
}

// addSessionState fills in, for each key found that holds a session lock's
// value, what its session key holds and its PTTL (read right after, in one
// transaction: a session key only moves on by renewals, which make a held
// lock look held a little longer, never the reverse).
func addSessionState(ctx context.Context, cl *redis.Client, found []Leftover) error {
	idx, keys := []int{}, []string{}
	for j, l := range found {
		if _, _, sk, ok := node.ParseSession(l.Key, l.Token); ok {
			idx, keys = append(idx, j), append(keys, sk)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	vals, pttls, err := GetPTTLs(ctx, cl, keys)
	if err != nil {
		return err
	}
	for j, i := range idx {
		found[i].SessionInc, found[i].SessionPTTL = vals[j], pttls[j]
	}
	return nil
}
