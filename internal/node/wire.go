package node

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/internal/scripts"
)

// An operation's wire format, in one table: the command (a script, run
// with EVALSHA and again with EVAL when the server answers NOSCRIPT, or a
// plain command), its keys and arguments, and how its reply reads as a
// Result. Pools run Ops only through Cmd, Result and Eval.
type wire struct {
	script *redis.Script     // nil: a plain command
	args   func(o *Op) []any // the command, built into o.argv
	reply  func(ctx context.Context, args ...any) redis.Cmder
	read   func(o *Op, c redis.Cmder) Result
}

var wires = [...]wire{
	Acquire: {script: scripts.Acquire, args: func(o *Op) []any {
		return o.waiter(o.script(1, o.KeyArg, o.TokenArg, o.TTL.Milliseconds()))
	}, reply: intCmd, read: readInt},
	AcquireFenced: {script: scripts.AcquireFenced, args: func(o *Op) []any {
		return o.waiter(o.script(3, o.KeyArg, o.FenceKey, OwnFence(o.Key), o.TokenArg, o.TTL.Milliseconds()))
	}, reply: intCmd, read: readCounter},
	RaiseFence: {script: scripts.RaiseFence, args: func(o *Op) []any {
		if len(o.Keys) > 1 { // a multi-key lock's: its other keys follow the counter
			a := append(make([]any, 0, 6+len(o.Keys)), argEvalSha, shas[RaiseFence], 1+len(o.Keys), o.KeyArg, o.FenceKey)
			return append(append(a, o.Keys[1:]...), o.TokenArg, o.Fence)
		}
		return o.script(2, o.KeyArg, o.FenceKey, o.TokenArg, o.Fence)
	}, reply: intCmd, read: readInt},
	Extend: {script: scripts.Extend, args: func(o *Op) []any {
		return o.script(1, o.KeyArg, o.TokenArg, o.TTL.Milliseconds())
	}, reply: intCmd, read: readInt},
	Release: {script: scripts.Release, args: func(o *Op) []any {
		switch {
		case o.Grace > 0 && o.Waiter != "":
			return o.script(1, o.KeyArg, o.TokenArg, o.Grace.Milliseconds(), o.Waiter, o.LineTTL.Milliseconds())
		case o.Grace > 0:
			return o.script(1, o.KeyArg, o.TokenArg, o.Grace.Milliseconds())
		}
		return o.script(1, o.KeyArg, o.TokenArg)
	}, reply: stringCmd, read: readRelease},
	Get: {args: func(o *Op) []any { return append(o.argv[:0], argGet, o.KeyArg) }, reply: stringCmd, read: readGet},
	ExtendMany: {script: scripts.ExtendMany, args: func(o *Op) []any {
		a := make([]any, 0, 4+2*len(o.Keys))
		a = append(a, argEvalSha, shas[ExtendMany], len(o.Keys))
		a = append(a, o.Keys...)
		a = append(a, o.TTL.Milliseconds())
		return append(a, o.Tokens...)
	}, reply: stringCmd, read: readBits},
	AcquireSession: {script: scripts.AcquireSession, args: func(o *Op) []any {
		return o.waiter(o.script(3, o.KeyArg, o.Session, o.Seq, o.TokenArg, o.TTL.Milliseconds(), o.KeyTTL.Milliseconds(), o.PrefixLen))
	}, reply: intCmd, read: readInt},
	RenewSession: {script: scripts.RenewSession, args: func(o *Op) []any {
		return o.script(1, o.KeyArg, o.TokenArg, o.TTL.Milliseconds())
	}, reply: intCmd, read: readInt},
	Peek: {script: scripts.Peek, args: func(o *Op) []any {
		return o.script(1, o.KeyArg)
	}, reply: stringCmd, read: readGet},
	Leave: {script: scripts.Leave, args: func(o *Op) []any {
		tell := "0"
		if o.Tell {
			tell = "1"
		}
		return o.script(1, o.KeyArg, o.Waiter, o.Grace.Milliseconds(), o.LineTTL.Milliseconds(), tell)
	}, reply: intCmd, read: readInt},
	Resume: {script: scripts.Resume, args: func(o *Op) []any {
		return o.script(1, o.KeyArg, o.TokenArg, o.TTL.Milliseconds())
	}, reply: intCmd, read: readInt},
	Inspect: {script: scripts.Inspect, args: func(o *Op) []any {
		return o.script(3, o.KeyArg, o.FenceKey, OwnFence(o.Key))
	}, reply: stringCmd, read: readGet},
	AcquireAll: {script: scripts.AcquireAll, args: func(o *Op) []any {
		n := len(o.Keys)
		a := o.scriptKeys(n, 2*n+1)
		if o.FenceKey != "" {
			a = append(a, o.FenceKey)
			for _, k := range o.Keys {
				a = append(a, OwnFence(k.(string)))
			}
			a[2] = 2*n + 1
		}
		return append(a, o.TokenArg, o.TTL.Milliseconds(), n)
	}, reply: intCmd, read: readCounter},
	ReleaseAll: {script: scripts.ReleaseAll, args: func(o *Op) []any {
		a := o.scriptKeys(len(o.Keys), 0)
		if o.Grace > 0 {
			return append(a, o.TokenArg, o.Grace.Milliseconds())
		}
		return append(a, o.TokenArg)
	}, reply: intCmd, read: readInt},
	HeldAll: {script: scripts.HeldAll, args: func(o *Op) []any {
		return append(o.scriptKeys(len(o.Keys), 0), o.TokenArg)
	}, reply: intCmd, read: readInt},
	AcquireShared: {script: scripts.AcquireShared, args: func(o *Op) []any {
		return o.script(1, o.KeyArg, o.TokenArg, o.TTL.Milliseconds())
	}, reply: intCmd, read: readInt},
	ExtendShared: {script: scripts.ExtendShared, args: func(o *Op) []any {
		return o.script(1, o.KeyArg, o.TokenArg, o.TTL.Milliseconds())
	}, reply: intCmd, read: readInt},
	ReleaseShared: {script: scripts.ReleaseShared, args: func(o *Op) []any {
		if o.Grace > 0 {
			return o.script(1, o.KeyArg, o.TokenArg, o.Grace.Milliseconds())
		}
		return o.script(1, o.KeyArg, o.TokenArg)
	}, reply: intCmd, read: readInt},
	HeldShared: {script: scripts.HeldShared, args: func(o *Op) []any {
		return o.script(1, o.KeyArg, o.TokenArg)
	}, reply: intCmd, read: readInt},
	AcquirePermit: {script: scripts.AcquirePermit, args: func(o *Op) []any {
		return append(o.scriptKeys(len(o.Keys), 4), o.TokenArg, o.TTL.Milliseconds(), o.Permits, o.Slot+1)
	}, reply: stringCmd, read: readPermit},
	ExtendPermit: {script: scripts.ExtendPermit, args: func(o *Op) []any {
		return o.script(2, o.KeyArg, o.FenceKey, o.TokenArg, o.TTL.Milliseconds(), o.Permits)
	}, reply: intCmd, read: readInt},
}

// Boxed constants of the commands, so that building Args does not allocate
// for them.
var (
	argGet, argEvalSha any                   = "get", "evalsha"
	shas               [ExtendPermit + 1]any // per Kind, for scripts
)

func init() {
	for k, w := range wires {
		if w.script != nil {
			shas[k] = w.script.Hash()
		}
	}
}

// script returns EVALSHA sha numkeys keys... args... in o's storage.
func (o *Op) script(numkeys int, keysAndArgs ...any) []any {
	a := append(o.argv[:0], argEvalSha, shas[o.Kind], numkeys)
	return append(a, keysAndArgs...)
}

// scriptKeys returns EVALSHA sha n Keys..., with room for extra more
// arguments, in storage of its own (a multi-key command's length varies).
func (o *Op) scriptKeys(n, extra int) []any {
	a := make([]any, 0, 3+n+extra+3)
	a = append(a, argEvalSha, shas[o.Kind], n)
	return append(a, o.Keys...)
}

// waiter appends an acquire's waiter arguments to a, when it has a waiter.
func (o *Op) waiter(a []any) []any {
	if o.Waiter == "" {
		return a
	}
	inLine := "0"
	if o.InLine {
		inLine = "1"
	}
	return append(a, o.Waiter, o.Rank, o.LineTTL.Milliseconds(), inLine)
}

// Build fills in o.Args (and KeyArg and TokenArg when nil), in o's own
// storage: an Op embedded in a longer-lived struct costs no allocation of
// its own.
func (o *Op) Build() {
	if o.KeyArg == nil {
		o.KeyArg = o.Key
	}
	if o.TokenArg == nil && o.Kind != Get && o.Kind != Peek && o.Kind != ExtendMany && o.Kind != Inspect {
		o.TokenArg = o.Token
	}
	o.Args = wires[o.Kind].args(o)
}

// Cmd returns o as a go-redis command bound to ctx, to be processed.
func (o *Op) Cmd(ctx context.Context) redis.Cmder { return wires[o.Kind].reply(ctx, o.Args...) }

// Result reads a processed Cmd as o's Result. A NOSCRIPT error means the
// server has lost its script cache: run Eval.
func (o *Op) Result(c redis.Cmder) Result { return wires[o.Kind].read(o, c) }

// NoScript reports whether r asks for Eval.
func NoScript(r Result) bool { return r.Err != nil && redis.HasErrorPrefix(r.Err, "NOSCRIPT") }

// Eval runs o's script with EVAL, which also loads it, and reads its reply.
func (o *Op) Eval(ctx context.Context, c redis.Scripter) Result {
	w := wires[o.Kind]
	if w.script == nil {
		return Result{Err: errors.New("node: NOSCRIPT for a command that is not a script")}
	}
	n := o.Args[2].(int) // EVALSHA sha numkeys keys... args...
	keys := make([]string, n)
	for i, k := range o.Args[3 : 3+n] {
		keys[i] = fmt.Sprint(k)
	}
	cmd := w.script.Eval(ctx, c, keys, o.Args[3+n:]...)
	switch r := w.reply(ctx).(type) {
	case *redis.StringCmd:
		v, err := cmd.Result()
		if n, ok := v.(int64); ok { // a release's integer reply
			v = strconv.FormatInt(n, 10)
		}
		s, _ := v.(string)
		r.SetVal(s)
		r.SetErr(err)
		return o.Result(r)
	case *redis.IntCmd:
		v, err := cmd.Int64()
		r.SetVal(v)
		r.SetErr(err)
		return o.Result(r)
	}
	return Result{Err: errors.New("node: a script with a reply of an unknown type")}
}

func stringCmd(ctx context.Context, args ...any) redis.Cmder { return redis.NewStringCmd(ctx, args...) }
func intCmd(ctx context.Context, args ...any) redis.Cmder    { return redis.NewIntCmd(ctx, args...) }

func readGet(_ *Op, c redis.Cmder) Result {
	v, err := c.(*redis.StringCmd).Result()
	if errors.Is(err, redis.Nil) {
		err = nil
	}
	return Result{Str: v, Err: err}
}

func readBits(o *Op, c redis.Cmder) Result {
	v, err := c.(*redis.StringCmd).Result()
	if err == nil && len(v) != len(o.Keys) {
		err = fmt.Errorf("node: extend of %d keys answered %d results", len(o.Keys), len(v))
	}
	return Result{Str: v, Err: err}
}

// readRelease reads a release's reply, read as a string: an integer (0 or
// 1), or, when the release handed the key to a waiter, the integer, Sep and
// the waiter (Str). An integer reply costs no allocation.
func readRelease(_ *Op, c redis.Cmder) Result {
	v, err := c.(*redis.StringCmd).Result()
	if err != nil {
		return Result{Err: err}
	}
	n, w, _ := strings.Cut(v, string(Sep))
	if n != "0" && n != "1" {
		return Result{Err: fmt.Errorf("node: a release answered %q", v)}
	}
	return Result{Int: int64(n[0] - '0'), Str: w}
}

// readPermit reads an AcquirePermit's reply: "1" or "0" and one bit per
// permit, or "!" and the count the node declares.
func readPermit(o *Op, c redis.Cmder) Result {
	v, err := c.(*redis.StringCmd).Result()
	if err != nil {
		return Result{Err: err}
	}
	if d, ok := strings.CutPrefix(v, "!"); ok {
		n, err := strconv.ParseInt(d, 10, 64)
		if err != nil || n < 1 {
			return Result{Err: fmt.Errorf("node: semaphore count key %q holds %q, not a number of permits: it was changed outside quorumlock", o.Keys[0], d)}
		}
		return Result{Int: -n}
	}
	if len(v) != 1+o.Permits || (v[0] != '0' && v[0] != '1') {
		return Result{Err: fmt.Errorf("node: a permit acquire answered %q", v)}
	}
	return Result{Int: int64(v[0] - '0'), Str: v[1:]}
}

func readInt(_ *Op, c redis.Cmder) Result {
	n, err := c.(*redis.IntCmd).Result()
	return Result{Int: n, Err: err}
}

func readCounter(o *Op, c redis.Cmder) Result {
	r := readInt(o, c)
	if r.Err == nil && r.Int < 0 {
		r.Err = fmt.Errorf("pool: fencing counter %q is negative (%d): it was changed outside quorumlock", o.FenceKey, r.Int)
	}
	return r
}

// Inspection is one node's answer to an Inspect, as ParseInspect reads it.
type Inspection struct {
	Token string // the token that holds the key, "" when it is free or shared
	// Shared are the tokens of the key's live shared holders (non-nil,
	// perhaps empty, when the key is shared).
	Shared []string
	// TTL is how long the key lives (for a session lock: its session
	// key); meaningful when Token is not "".
	TTL time.Duration
	// Fence and OldFence are the counters the key's next fenced token
	// exceeds: the one it shares with other keys and its own from earlier
	// versions; each "" when absent, "x" when not an integer.
	Fence, OldFence string
}

// ParseInspect reads an Inspect's reply (internal/scripts/inspect.lua).
func ParseInspect(s string) (Inspection, error) {
	parts := strings.SplitN(s, string(Sep), 4)
	if len(parts) != 4 {
		return Inspection{}, fmt.Errorf("node: an inspect answered %q", s)
	}
	ms, err := strconv.ParseInt(parts[0], 10, 64)
	if err != nil {
		return Inspection{}, fmt.Errorf("node: an inspect answered a TTL of %q", parts[0])
	}
	in := Inspection{Token: parts[3], Fence: parts[1], OldFence: parts[2]}
	if SharedValue(in.Token) {
		in.Shared = strings.Split(in.Token, string(Sep))[1:]
		in.Token = ""
	}
	if in.Token != "" || in.Shared != nil {
		in.TTL = time.Duration(max(ms, 0)) * time.Millisecond
	}
	return in, nil
}
