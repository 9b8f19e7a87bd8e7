package sim

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/internal/node"
)

// simNode is one simulated Redis master: a store, the engine that runs the
// library's scripts on it, and its clock, which runs at rate times the
// simulation's (virtual) clock. It can be paused (commands that land wait,
// in order, and run on resume), and restarted, keeping its data (as with
// appendfsync always) or losing it (amnesia): a restart resets every
// connection, so commands in flight to it are lost.
//
// The simulation's goroutines reach it through exec and the fault methods,
// under its mutex: each script runs alone, as on a real server.
type simNode struct {
	id   int
	name string
	rate float64   // clock rate, relative to virtual time
	t0   time.Time // virtual time the simulation started
	base int64     // what the node's clock read at t0 (ns)
	tr   *tracer

	mu      sync.Mutex
	st      *store
	eng     *engine
	paused  bool
	waiting []*call // landed while paused, in order
	down    bool    // killed: refuses connections until restarted
	epoch   int     // counts restarts: a connection belongs to one epoch
	calls   map[*call]struct{}
	subs    []*subscription // in the order they were opened

	exec chan *call // commands landing, to serve
	ran  int        // commands run

	// mutate, if not nil, gives the text the node runs for a script's
	// (a control's broken script, see mutants); nil runs the library's.
	mutate func(src string) string
}

// nodeClockBase is what every node's clock reads at the simulation's start
// (2026-01-01 UTC, in ns): scripts read it through TIME.
const nodeClockBase = int64(1767225600) * 1e9

func newNode(id int, rate float64, t0 time.Time, tr *tracer) *simNode {
	st := newStore()
	return &simNode{id: id, name: "n" + strconv.Itoa(id), rate: rate, t0: t0, base: nodeClockBase, tr: tr,
		st: st, eng: newEngine(st), calls: map[*call]struct{}{}, exec: make(chan *call, 64)}
}

func (n *simNode) lock()   { n.mu.Lock() }
func (n *simNode) unlock() { n.mu.Unlock() }

// now is the node's clock, in ns.
func (n *simNode) now() int64 {
	return n.base + int64(float64(time.Since(n.t0))*n.rate)
}

// land is a command arriving at the node: it runs now, or on resume when
// the node is paused; a command of an earlier epoch (its connection was
// reset by a restart) or sent to a node that is down is lost.
func (n *simNode) land(c *call) { n.exec <- c }

// serve runs the commands that land, one at a time, on one goroutine whose
// stack has grown to fit the Lua VM once, until exec is closed.
func (n *simNode) serve() {
	for c := range n.exec {
		n.arrive(c)
	}
}

func (n *simNode) arrive(c *call) {
	n.lock()
	defer n.unlock()
	switch {
	case c.epoch != n.epoch || n.down:
		n.tr.add("%s lost at %s (node restarted or down)", c, n.name)
	case n.paused:
		n.waiting = append(n.waiting, c)
		n.tr.add("%s waits at paused %s", c, n.name)
	default:
		n.runLocked(c)
	}
}

func (n *simNode) runLocked(c *call) {
	r := n.execLocked(c.op)
	n.ran++
	n.publishLocked()
	late := ""
	if n.tr.on && c.isDone() {
		late = " LATE (its caller gave up)"
	}
	if n.tr.on {
		n.tr.add("%s ran on %s%s: %s", c, n.name, late, resultString(r))
	}
	c.ran(r)
}

// execLocked runs op on the store: the library's script for it, through
// node.Op.Eval, the path a real Pool takes after NOSCRIPT, or GET.
func (n *simNode) execLocked(op *node.Op) node.Result {
	sc := scripter{n: n}
	if op.Kind == node.Get {
		cmd := redis.NewStringCmd(context.Background(), op.Args...)
		v, err := n.st.get(n.now(), []string{op.Key})
		switch {
		case err != nil:
			cmd.SetErr(err)
		case v == nil:
			cmd.SetErr(redis.Nil)
		default:
			cmd.SetVal(v.(string))
		}
		return op.Result(cmd)
	}
	return op.Eval(context.Background(), sc)
}

// pause holds the commands that land until resume.
func (n *simNode) pause() {
	n.lock()
	defer n.unlock()
	n.paused = true
	n.tr.add("%s paused", n.name)
}

// resume runs the commands that landed while paused, in order.
func (n *simNode) resume() {
	n.lock()
	defer n.unlock()
	n.paused = false
	n.tr.add("%s resumed (%d commands waited)", n.name, len(n.waiting))
	for _, c := range n.waiting {
		n.runLocked(c)
	}
	n.waiting = nil
}

// kill stops the node: every connection is reset (the commands in flight
// fail, those that had not run are lost) and new ones are refused.
func (n *simNode) kill() {
	n.lock()
	n.down, n.paused, n.waiting = true, false, nil
	n.epoch++
	calls := make([]*call, 0, len(n.calls))
	for c := range n.calls {
		calls = append(calls, c)
	}
	clear(n.calls)
	n.tr.add("%s killed (%d connections reset)", n.name, len(calls))
	n.unlock()
	for _, c := range calls {
		c.reset(errReset)
	}
}

// restart brings a killed node back, with its data or without (amnesia).
func (n *simNode) restart(amnesia bool) {
	n.lock()
	defer n.unlock()
	n.down = false
	if amnesia {
		n.st.keys = map[string]*value{}
	}
	n.tr.add("%s restarted (amnesia %v)", n.name, amnesia)
	for _, s := range n.subs {
		s.resubscribe()
	}
}

// connect registers c on the node's current connections, or fails when
// the node is down.
func (n *simNode) connect(c *call) error {
	n.lock()
	defer n.unlock()
	if n.down {
		return errRefused
	}
	c.epoch = n.epoch
	n.calls[c] = struct{}{}
	return nil
}

func (n *simNode) disconnect(c *call) {
	n.lock()
	delete(n.calls, c)
	n.unlock()
}

// scripter runs EVAL on a node's engine: node.Op.Eval calls it with the
// script's text. The node's lock is held.
type scripter struct{ n *simNode }

func (s scripter) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	argv := make([]string, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case string:
			argv[i] = v
		case int64:
			argv[i] = strconv.FormatInt(v, 10)
		default:
			argv[i] = fmt.Sprint(a)
		}
	}
	if s.n.mutate != nil {
		script = s.n.mutate(script)
	}
	cmd := redis.NewCmd(ctx)
	v, err := s.n.eng.eval(s.n.now(), script, keys, argv)
	switch {
	case err != nil:
		s.n.tr.fail("%s: script error: %v", s.n.name, err)
		cmd.SetErr(redisError(err.Error()))
	case v == nil:
		cmd.SetErr(redis.Nil)
	default:
		cmd.SetVal(v)
	}
	return cmd
}

func (s scripter) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return s.unused(ctx)
}
func (s scripter) EvalRO(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return s.unused(ctx)
}
func (s scripter) EvalShaRO(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return s.unused(ctx)
}
func (s scripter) ScriptExists(ctx context.Context, hashes ...string) *redis.BoolSliceCmd {
	return redis.NewBoolSliceCmd(ctx)
}
func (s scripter) ScriptLoad(ctx context.Context, script string) *redis.StringCmd {
	return redis.NewStringCmd(ctx)
}

func (s scripter) unused(ctx context.Context) *redis.Cmd {
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(errors.New("sim: only EVAL is simulated"))
	return cmd
}

// redisError is an error reply: redis.Error, so the library reads it as
// the node's answer (it changed nothing).
type redisError string

func (e redisError) Error() string { return string(e) }
func (redisError) RedisError()     {}

func resultString(r node.Result) string {
	if r.Err != nil {
		return "error " + r.Err.Error()
	}
	if r.Str != "" {
		return fmt.Sprintf("%d %q", r.Int, r.Str)
	}
	return strconv.FormatInt(r.Int, 10)
}
