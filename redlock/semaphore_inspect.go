package redlock

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/quorumlock/quorumlock/internal/conf"
	"github.com/quorumlock/quorumlock/internal/node"
)

// A semaphore's permits are keys of their own (its name's key, 0x1f, "p"
// and the permit's number), and its count is declared under its name's key,
// 0x1f and "k": Client.Inspect of the name reads a key no permit uses, so it
// refuses a name the nodes declare a count for, and Semaphore.Inspect reads
// the permits.

// Inspect reads every permit on every node as Client.Inspect reads a lock:
// the i-th Inspection is permit i's (Key the name, RedisKey the permit's
// key). If ctx ends it returns those read so far and ctx.Err(); once Close
// has begun, ErrClosed.
func (s *Semaphore) Inspect(ctx context.Context) ([]*Inspection, error) {
	out := make([]*Inspection, 0, s.permits)
	for _, k := range s.keys[1:] {
		in, err := s.c.inspectKey(ctx, s.cfg, s.name, k.(string))
		if in != nil {
			out = append(out, in)
		}
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// opDeclared reads the permit count a semaphore's name declares on a node.
var opDeclared = &opSpec{name: "inspect", kind: node.Get}

// semaphoreName returns the error of Client.Inspect for key when nodes
// declare a semaphore's permit count under it, nil otherwise (also when
// too few nodes answered to tell).
func (c *Client) semaphoreName(ctx context.Context, cfg *conf.Config, key string) error {
	if err := c.enterRound(ctx, cfg); err != nil {
		return err
	}
	defer c.wg.Done()
	rd := c.run(ctx, cfg, send{spec: opDeclared, o: node.Op{Key: c.redisKey(cfg, key) + node.CountSuffix}})
	defer rd.finish(nil)
	count, nodes := 0, []string(nil)
	for {
		rep, ok := rd.r.Next()
		if !ok {
			break
		}
		if n, err := strconv.Atoi(rep.Str); rep.Err == nil && err == nil && n > 0 {
			count = n
			nodes = append(nodes, c.pools[rep.Node].Name())
		}
	}
	if nodes == nil {
		return nil
	}
	return fmt.Errorf("redlock: inspect %q: a semaphore of %d permits uses this name (declared on %s): its permits are keys of their own, which Inspect does not read; use Semaphore.Inspect", key, count, strings.Join(nodes, ", "))
}
