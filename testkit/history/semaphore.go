package history

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/quorumlock/quorumlock/internal/node"
)

// PermitKey is the key Check judges permit i of the semaphore name by: a
// lock of its own (Op.Semaphore). It is the semaphore's name with the
// suffix the library gives the permit's Redis key.
func PermitKey(name string, i int) string { return name + permitSuffix + strconv.Itoa(i) }

// permitSuffix starts the suffix of a permit's key (redlock.Semaphore).
const permitSuffix = node.PermitSuffix

// permitOf returns the permit a key made by PermitKey names, or ok false.
func permitOf(key string) (name string, i int, ok bool) {
	j := strings.LastIndex(key, permitSuffix)
	if j < 0 {
		return "", 0, false
	}
	i, err := strconv.Atoi(key[j+len(permitSuffix):])
	return key[:j], i, err == nil && i >= 0
}

// span is one holder's stretch of time in a semaphore: a permit's window
// or a critical section under it.
type span struct {
	token, who string
	start, end time.Duration
	over       bool // a section that ran past its holder's window
}

// crowd sweeps spans in time order ([start, end): one that starts when
// another ends does not overlap it) and calls breach, with one span per
// holder then active, each time a holder (a token) becomes active while
// more than k are; it returns the most holders active at once.
func crowd(spans []span, k int, breach func(active []span)) int {
	type event struct {
		at    time.Duration
		start bool
		i     int
	}
	evs := make([]event, 0, 2*len(spans))
	for i, sp := range spans {
		if sp.end > sp.start {
			evs = append(evs, event{sp.start, true, i}, event{sp.end, false, i})
		}
	}
	slices.SortFunc(evs, func(a, b event) int {
		return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(b2i(a.start), b2i(b.start)), cmp.Compare(a.i, b.i))
	})
	live := map[string]map[int]bool{} // token: its active spans
	most := 0
	for _, e := range evs {
		tok := spans[e.i].token
		if !e.start {
			delete(live[tok], e.i)
			if len(live[tok]) == 0 {
				delete(live, tok)
			}
			continue
		}
		if live[tok] == nil {
			live[tok] = map[int]bool{}
		}
		live[tok][e.i] = true
		most = max(most, len(live))
		if len(live[tok]) == 1 && len(live) > k {
			var active []span
			for _, t := range slices.Sorted(maps.Keys(live)) {
				active = append(active, spans[slices.Min(slices.Collect(maps.Keys(live[t])))])
			}
			breach(active)
		}
	}
	return most
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// checkSemaphores (SEM): at no instant do more than k permit windows of one
// semaphore of k permits overlap (each permit's key is judged as a lock by
// S1 too: one holder per permit), and at no instant are more than k
// holders of one semaphore inside critical sections under their permits
// (Section.Semaphore; an overlap in which a section ran past its holder's
// window is the holder's overrun: a note with cfg.TolerateOverruns). A
// semaphore recorded with two counts, and a permit's key that is not one of
// its semaphore's k, are violations too.
func checkSemaphores(s snapshot, holds map[string]*holding, cfg Config, r *Report) {
	permits := map[string]int{}
	for _, op := range s.ops {
		if op.Semaphore == "" {
			continue
		}
		if k, ok := permits[op.Semaphore]; ok && k != op.Permits {
			r.add(SEM, op.Semaphore, "recorded with %d permits by %s, and with %d before", op.Permits, op.Client, k)
			op.Permits = min(k, op.Permits) // judge by the smaller
		}
		permits[op.Semaphore] = op.Permits
	}
	windows, sections := map[string][]span{}, map[string][]span{}
	for _, x := range holds {
		if x.sem == "" {
			continue
		}
		r.Permits++
		if name, i, ok := permitOf(x.key); !ok || name != x.sem || i >= permits[x.sem] {
			r.add(SEM, x.sem, "%s holds key %q, not one of the semaphore's %d permits (PermitKey)", x, x.key, permits[x.sem])
		}
		windows[x.sem] = append(windows[x.sem], span{token: x.token, who: x.String(), start: x.ret, end: x.end})
	}
	for _, sec := range s.sections {
		if sec.Semaphore == "" {
			continue
		}
		x := holds[sec.Token]
		sections[sec.Semaphore] = append(sections[sec.Semaphore], span{token: sec.Token, start: sec.Start, end: sec.End, over: x != nil && sec.End > x.end,
			who: fmt.Sprintf("%s (token %s, section [%v, %v])", sec.Client, sec.Token, us(sec.Start), us(sec.End))})
		if _, ok := permits[sec.Semaphore]; !ok {
			permits[sec.Semaphore] = sec.Permits
		}
	}
	if len(windows)+len(sections) == 0 {
		r.Skipped[SEM] = "no semaphore permit recorded"
		return
	}
	r.Semaphores = len(windows)
	r.MostHolders = map[string]Crowd{}
	tolerated := 0
	for name, spans := range windows {
		k := permits[name]
		r.Checked[SEM] += len(spans)
		r.MostHolders[name] = Crowd{Permits: k, Most: crowd(spans, k, func(active []span) {
			r.add(SEM, name, "%d permit windows of a semaphore of %d permits overlap: %s", len(active), k, whos(active))
		})}
	}
	for name, spans := range sections {
		k := permits[name]
		r.Checked[SEM] += len(spans)
		crowd(spans, k, func(active []span) {
			if cfg.TolerateOverruns && slices.ContainsFunc(active, func(sp span) bool { return sp.over }) {
				tolerated++
				return
			}
			r.add(SEM, name, "%d critical sections under permits of a semaphore of %d permits overlap: %s", len(active), k, whos(active))
		})
	}
	if tolerated > 0 {
		r.note("SEM: %d times more critical sections than permits overlapped, one of them past its permit's validity (tolerated)", tolerated)
	}
}

func whos(active []span) string {
	var parts []string
	for _, sp := range active {
		parts = append(parts, sp.who)
	}
	return strings.Join(parts, "; ")
}

// Crowd is how many permit windows of one semaphore overlapped at most
// (SEM), and its number of permits.
type Crowd struct{ Permits, Most int }

// mostHolders lists, per semaphore, the most holders at once.
func mostHolders(m map[string]Crowd) string {
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d of %d", name, m[name].Most, m[name].Permits))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
