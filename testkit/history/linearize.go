package history

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// The linearizability check models one key as a read/write lock guarding
// a counter:
//
//	acquire(T)   legal when free (no holder, no shared holder); the lock is then held by T
//	release(T)   legal when held by T; the lock is then free
//	share(T)     legal when no lock is held alone; T joins the shared holders
//	unshare(T)   legal when T is a shared holder; it leaves them
//	inc(T, v)    legal when held by T alone and the counter is v; it becomes v+1
//	read(T, v)   legal when held by T (alone or shared) and the counter is v
//
// Each successful acquisition is an acquire that takes effect somewhere
// between the start of its winning round and its return, and a release at
// the end of its window (a point: the holder claims the lock until then,
// and a correct next holder's acquire returns after it). Each critical
// section that ended inside its holder's window is an inc (or a read, if it
// stopped before writing) between its start and end; one that ran past the
// window (the test process stalled) is kept as an inc that needs no holder,
// so that the counter stays right, and one whose write is unsure may or may
// not have incremented. Failed acquisitions say nothing (a Redlock attempt
// may fail while the lock is free) and are left out.
//
// Each key's operations are cut into segments wherever no operation is in
// flight and the lock is free; each segment starts from the counter values
// the previous ones allow and is checked on its own, so that the check
// stays fast over long runs.

type linKind uint8

const (
	linAcquire linKind = iota
	linRelease
	linInc
	linIncAny // an increment by a holder past its window
	linIncMaybe
	linRead
	linShare   // a shared holder's acquisition
	linUnshare // a shared holder's release
)

type linInput struct {
	kind  linKind
	token string
	read  int64
}

type linState struct {
	holder  string
	readers string // the shared holders' tokens, each followed by \x00, sorted (comparable)
	counter int64
}

// reads reports whether token t is one of st's shared holders.
func (st linState) reads(t string) bool {
	return strings.Contains("\x00"+st.readers, "\x00"+t+"\x00")
}

// withReaders returns st with the shared holders ts.
func (st linState) withReaders(ts []string) linState {
	slices.Sort(ts)
	st.readers = ""
	for _, t := range ts {
		st.readers += t + "\x00"
	}
	return st
}

// readerList returns st's shared holders.
func (st linState) readerList() []string {
	if st.readers == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(st.readers, "\x00"), "\x00")
}

var linModel = porcupine.NondeterministicModel{
	Step: func(state, input, _ any) []any {
		st, in := state.(linState), input.(linInput)
		switch in.kind {
		case linAcquire:
			if st.holder == "" && st.readers == "" {
				return []any{linState{holder: in.token, counter: st.counter}}
			}
		case linRelease:
			if st.holder == in.token {
				return []any{linState{counter: st.counter}}
			}
		case linShare:
			if st.holder == "" && !st.reads(in.token) {
				return []any{st.withReaders(append(st.readerList(), in.token))}
			}
		case linUnshare:
			if st.reads(in.token) {
				return []any{st.withReaders(slices.DeleteFunc(st.readerList(), func(t string) bool { return t == in.token }))}
			}
		case linInc:
			if st.holder == in.token && st.counter == in.read {
				return []any{linState{holder: st.holder, counter: st.counter + 1}}
			}
		case linIncAny:
			if st.counter == in.read {
				return []any{linState{holder: st.holder, counter: st.counter + 1}}
			}
		case linIncMaybe:
			if st.holder == in.token && st.counter == in.read {
				return []any{st, linState{holder: st.holder, counter: st.counter + 1}}
			}
		case linRead:
			if (st.holder == in.token || st.reads(in.token)) && st.counter == in.read {
				return []any{st}
			}
		}
		return nil
	},
	DescribeOperation: func(input, _ any) string {
		in := input.(linInput)
		switch in.kind {
		case linAcquire:
			return "acquire " + in.token
		case linRelease:
			return "release " + in.token
		case linShare:
			return "acquire shared " + in.token
		case linUnshare:
			return "release shared " + in.token
		case linRead:
			return fmt.Sprintf("read %d by %s", in.read, in.token)
		}
		return fmt.Sprintf("inc %d by %s", in.read, in.token)
	},
	DescribeState: func(state any) string {
		st := state.(linState)
		if st.readers != "" {
			return fmt.Sprintf("shared holders %q, counter %d", st.readerList(), st.counter)
		}
		return fmt.Sprintf("holder %q, counter %d", st.holder, st.counter)
	},
}

// checkLinearizable runs the mutex-and-counter model over every key.
func checkLinearizable(byKey map[string][]*holding, sections []Section, holds map[string]*holding, cfg Config, r *Report) {
	ops := map[string][]porcupine.Operation{}
	for key, xs := range byKey {
		for _, x := range xs {
			acq, rel := linAcquire, linRelease
			if x.shared {
				acq, rel = linShare, linUnshare
			}
			ops[key] = append(ops[key],
				porcupine.Operation{Input: linInput{kind: acq, token: x.token}, Call: int64(x.round), Return: int64(x.ret)},
				porcupine.Operation{Input: linInput{kind: rel, token: x.token}, Call: int64(x.end), Return: int64(x.end)})
		}
	}
	for _, sec := range sections {
		x := holds[sec.Token]
		if x == nil || !sec.Counted {
			continue
		}
		in := linInput{token: sec.Token, read: sec.Read}
		inside := sec.End <= x.end
		switch {
		case sec.Wrote && inside:
			in.kind = linInc
		case sec.Wrote:
			in.kind = linIncAny
		case sec.Unsure:
			in.kind = linIncMaybe
		case sec.Err == "" && inside:
			in.kind = linRead
		default:
			continue
		}
		ops[sec.Key] = append(ops[sec.Key], porcupine.Operation{Input: in, Call: int64(sec.Start), Return: int64(sec.End)})
	}
	keys := make([]string, 0, len(ops))
	for k := range ops {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, key := range keys {
		checkKeyLinearizable(key, ops[key], cfg, r)
	}
}

func checkKeyLinearizable(key string, ops []porcupine.Operation, cfg Config, r *Report) {
	slices.SortFunc(ops, func(a, b porcupine.Operation) int {
		return cmp.Or(cmp.Compare(a.Call, b.Call), cmp.Compare(a.Return, b.Return))
	})
	counters := []any{linState{}} // the states a segment may start from
	begin, maxReturn, open := 0, int64(-1<<63), 0
	for i, op := range ops {
		in := op.Input.(linInput)
		switch in.kind {
		case linAcquire, linShare:
			open++
		case linRelease, linUnshare:
			open--
		}
		maxReturn = max(maxReturn, op.Return)
		if open == 0 && (i+1 == len(ops) || ops[i+1].Call > maxReturn) {
			counters = checkSegment(key, ops[begin:i+1], counters, cfg, r)
			begin = i + 1
		}
	}
	if begin < len(ops) {
		checkSegment(key, ops[begin:], counters, cfg, r)
	}
}

// checkSegment checks one segment from the given start states and returns
// the states the next segment may start from.
func checkSegment(key string, seg []porcupine.Operation, starts []any, cfg Config, r *Report) []any {
	r.Checked[LIN]++
	m := linModel
	m.Init = func() []any { return starts }
	res := porcupine.CheckOperationsTimeout(m.ToModel(), seg, cfg.LinTimeout)
	var lo, hi int64
	for i, s := range starts {
		c := s.(linState).counter
		if i == 0 || c < lo {
			lo = c
		}
		hi = max(hi, c)
	}
	for _, op := range seg {
		switch op.Input.(linInput).kind {
		case linInc, linIncAny:
			lo++
			hi++
		case linIncMaybe:
			hi++
		}
	}
	next := make([]any, 0, hi-lo+1)
	for c := lo; c <= hi; c++ {
		next = append(next, linState{counter: c})
	}
	switch res {
	case porcupine.Illegal:
		var desc []string
		for _, op := range seg {
			if len(desc) == 12 {
				desc = append(desc, fmt.Sprintf("... %d more", len(seg)-12))
				break
			}
			desc = append(desc, fmt.Sprintf("%s [%v, %v]", linModel.DescribeOperation(op.Input, nil), time.Duration(op.Call), time.Duration(op.Return)))
		}
		r.add(LIN, key, "no mutex linearization of %d operations: %s", len(seg), strings.Join(desc, "; "))
		if len(next) == 0 {
			return []any{linState{}}
		}
	case porcupine.Unknown:
		r.note("LIN %s: a segment of %d operations was not decided within %v", key, len(seg), cfg.LinTimeout)
	}
	return next
}
