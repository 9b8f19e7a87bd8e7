package sim

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	lua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/parse"

	"github.com/quorumlock/quorumlock/internal/scripts"
)

// engine runs the library's Lua scripts, as Redis would, against one
// node's store: the scripts themselves (internal/scripts, the very text
// EVAL sends), not a model of them. One engine per node; not safe for
// concurrent use (the node's mutex guards it).
type engine struct {
	L   *lua.LState
	st  *store
	now int64 // the node's clock while a script runs

	args []string    // redis.call's, reused
	ok   *lua.LTable // {ok = "OK"}

	keys, argv *lua.LTable // KEYS and ARGV
}

// engines keeps engines between schedules: a Lua state costs 60 µs to make.
var engines sync.Pool

// newEngine returns an engine over st: a kept one, or a new one.
func newEngine(st *store) *engine {
	if e, ok := engines.Get().(*engine); ok {
		e.st = st
		e.bound(libLineMax, libSharedMax)
		return e
	}
	L := lua.NewState(lua.Options{SkipOpenLibs: true, CallStackSize: 64, RegistrySize: 1024})
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{{lua.BaseLibName, lua.OpenBase}, {lua.TabLibName, lua.OpenTable}, {lua.StringLibName, lua.OpenString}, {lua.MathLibName, lua.OpenMath}} {
		L.Push(L.NewFunction(lib.open))
		L.Push(lua.LString(lib.name))
		L.Call(1, 0)
	}
	e := &engine{L: L, st: st}
	r := L.NewTable()
	r.RawSetString("call", L.NewFunction(func(L *lua.LState) int { return e.redisCall(L, false) }))
	r.RawSetString("pcall", L.NewFunction(func(L *lua.LState) int { return e.redisCall(L, true) }))
	L.SetGlobal("redis", r)
	e.ok = toLua(L, status("OK")).(*lua.LTable)
	e.keys, e.argv = L.NewTable(), L.NewTable()
	L.SetGlobal("KEYS", e.keys)
	L.SetGlobal("ARGV", e.argv)
	if err := L.DoString(libGlobals); err != nil {
		panic(fmt.Sprintf("sim: lib.lua: %v", err))
	}
	e.bound(libLineMax, libSharedMax)
	return e
}

// lib is the text of lib.lua's functions that most scripts begin with, and
// libGlobals the same text with its top-level locals (functions and
// constants such as LINE_MAX) made global: each engine defines them once,
// and runs only the rest of such a script on each call (thirteen closures
// fewer per command; a script cannot tell the difference, as none defines a
// global of its own).
var (
	lib        = scripts.Lib()
	libGlobals = globalize(lib)
)

// globalize drops "local " from the lines of src that start with it (its
// top-level locals; a local inside a function is indented).
func globalize(src string) string {
	var b strings.Builder
	for line := range strings.Lines(src) {
		b.WriteString(strings.TrimPrefix(line, "local "))
	}
	return b.String()
}

func init() {
	// A vararg function (every chunk is one) otherwise builds Lua 5.0's
	// "arg" table on each call, a map no script of ours reads: a fifth of
	// the cost of a script. Redis' Lua 5.1 has no such table either.
	lua.CompatVarArg = false
}

// release gives e back for another schedule's node.
func (e *engine) release() {
	e.st = nil
	engines.Put(e)
}

// protos caches compiled scripts by their source. Sources are few and each
// comes as the same string every time (a *redis.Script's), so the key is
// its data pointer and length, not its 4 KB of text.
var protos sync.Map // srcKey -> compiled

type compiled struct {
	src   string // compared too: the pointer alone could be reused
	proto *lua.FunctionProto
}

type srcKey struct {
	p *byte
	n int
}

func compile(src string) (*lua.FunctionProto, error) {
	k := srcKey{unsafe.StringData(src), len(src)}
	if c, ok := protos.Load(k); ok && c.(compiled).src == src {
		return c.(compiled).proto, nil
	}
	chunk, err := parse.Parse(strings.NewReader(strings.TrimPrefix(src, lib)), "script")
	if err != nil {
		return nil, err
	}
	p, err := lua.Compile(chunk, "script")
	if err != nil {
		return nil, err
	}
	protos.Store(k, compiled{src, p})
	return p, nil
}

// eval runs src with KEYS and ARGV at node time now, and returns its reply
// converted as Redis converts a script's return value (int64, string, nil,
// []any) or the error reply it raised.
func (e *engine) eval(now int64, src string, keys, argv []string) (any, error) {
	p, err := compile(src)
	if err != nil {
		return nil, fmt.Errorf("ERR Error compiling script: %v", err)
	}
	e.now = now
	L := e.L
	fill(e.keys, keys)
	fill(e.argv, argv)
	L.Push(L.NewFunctionFromProto(p))
	if err := L.PCall(0, 1, nil); err != nil {
		return nil, fmt.Errorf("ERR Error running script: %v", err)
	}
	ret := L.Get(-1)
	L.Pop(1)
	return fromLua(ret)
}

// fill makes t the array of ss (the engine's KEYS and ARGV are made once,
// and refilled for each script; no script changes them).
func fill(t *lua.LTable, ss []string) {
	n := t.Len()
	for i, s := range ss {
		t.RawSetInt(i+1, lua.LString(s))
	}
	for i := n; i > len(ss); i-- {
		t.RawSetInt(i, lua.LNil)
	}
}

// redisCall is redis.call (and, with protected, redis.pcall): it runs the
// command on the store and pushes the reply converted to Lua.
func (e *engine) redisCall(L *lua.LState, protected bool) int {
	args := slices.Grow(e.args[:0], L.GetTop())[:L.GetTop()] // the store keeps none of them
	e.args = args
	for i := range args {
		switch v := L.Get(i + 1).(type) {
		case lua.LString:
			args[i] = string(v)
		case lua.LNumber:
			args[i] = number(float64(v))
		default:
			L.RaiseError("Lua redis lib command arguments must be strings or integers")
		}
	}
	reply, err := e.st.call(e.now, args)
	if err != nil {
		if !protected {
			L.RaiseError("%s", err.Error())
		}
		t := L.NewTable()
		t.RawSetString("err", lua.LString(err.Error()))
		L.Push(t)
		return 1
	}
	if reply == status("OK") {
		L.Push(e.ok) // shared: no script changes a reply table
	} else {
		L.Push(toLua(L, reply))
	}
	return 1
}

// number formats a Lua number as Redis does for a command argument.
func number(f float64) string {
	if f == math.Trunc(f) && math.Abs(f) < 1e17 {
		return strconv.FormatInt(int64(f), 10)
	}
	return strconv.FormatFloat(f, 'g', 17, 64)
}

// toLua converts a command's reply to Lua as Redis does: integers to
// numbers, bulk strings to strings, a nil bulk to false, arrays to tables,
// a status to {ok = ...}.
func toLua(L *lua.LState, r any) lua.LValue {
	switch v := r.(type) {
	case int64:
		return lua.LNumber(v)
	case string:
		return lua.LString(v)
	case status:
		t := L.NewTable()
		t.RawSetString("ok", lua.LString(v))
		return t
	case []any:
		t := L.CreateTable(len(v), 0)
		for _, x := range v {
			t.Append(toLua(L, x))
		}
		return t
	}
	return lua.LFalse
}

// fromLua converts a script's return value to a reply as Redis does:
// numbers are truncated to integers, true is 1, false and nil are a nil
// reply, a table is an array up to its first nil, or an error or status
// reply when it has an err or ok field.
func fromLua(v lua.LValue) (any, error) {
	switch x := v.(type) {
	case lua.LNumber:
		return int64(x), nil
	case lua.LString:
		return string(x), nil
	case lua.LBool:
		if x {
			return int64(1), nil
		}
		return nil, nil
	case *lua.LTable:
		if e, ok := x.RawGetString("err").(lua.LString); ok {
			return nil, errors.New(string(e))
		}
		if s, ok := x.RawGetString("ok").(lua.LString); ok {
			return string(s), nil
		}
		var out []any
		for i := 1; ; i++ {
			el := x.RawGetInt(i)
			if el == lua.LNil {
				return out, nil
			}
			r, err := fromLua(el)
			if err != nil {
				return nil, err
			}
			out = append(out, r)
		}
	}
	return nil, nil
}
