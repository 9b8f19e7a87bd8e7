package main

// The floor (w16 only): what the server commands of our lock+unlock cycle
// cost when nothing else is done around them.
//
// A quorumlock cycle runs, on each of the 5 nodes, the acquire script (GET,
// then SET PX) and the release script (GET, DEL, PUBLISH): 25 server
// commands. The floor sends those same 25 plain commands per cycle through
// go-redis pipelines, as deep as they go: each step sends one pipeline per
// node carrying all 16 workers' commands (16 × 5 = 80), the 5 nodes in
// parallel, and counts 16 cycles, less the workers that got a reply other
// than the one the commands must give. There is no lock here, no quorum
// and no waiting on a reply before sending the next command: it is the
// least CPU (client and servers) such a cycle can take, the yardstick of
// the "total CPU per w16 cycle" target.
//
// The script floor (also w16 only) is the least a lock that runs those
// commands in scripts can spend: each step sends, per node, one pipeline of
// all 16 workers' acquire scripts (GET, then SET PX), waits for it (a lock
// is held before it is released), then one of their release scripts (GET
// and compare, DEL, PUBLISH): two round trips per cycle, as deep as they
// go, with the shortest scripts that run the same commands. What separates
// quorumlock from it is our own work (rounds, quorums, waiting, the line
// arguments); what separates it from the floor is the price of scripts and
// of holding the lock between two round trips.

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	floorName       = "floor"
	scriptFloorName = "script-floor"
	floorScenario   = "w16" // the only scenario the floors run in
)

// isFloor reports whether implementation name is one of the floors (no
// lock: runFloor runs it).
func isFloor(name string) bool { return name == floorName || name == scriptFloorName }

// floorSkips reports whether implementation name sits out scenario sc: the
// floors run only in w16.
func floorSkips(sc scenario, name string) bool {
	return isFloor(name) && sc.id != floorScenario
}

// The script floor's scripts: the acquire and release scripts' server
// commands, and nothing else.
var (
	floorAcquire = redis.NewScript(`if redis.call('GET', KEYS[1]) then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1`)
	floorRelease = redis.NewScript(`if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.pcall('PUBLISH', KEYS[1], ARGV[1])
return 1`)
)

// floor is the pipelined command stream for one run.
type floor struct {
	clients  []*redis.Client
	keys     [][]string // per worker, 64 keys used in turn
	run      int64
	scripted bool // the script floor
}

func newFloor(addrs []string, workers int, scripted bool) *floor {
	f := &floor{run: runSeq.Add(1), scripted: scripted}
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a})
		if scripted { // errors show as wrong replies
			_ = floorAcquire.Load(context.Background(), c).Err()
			_ = floorRelease.Load(context.Background(), c).Err()
		}
		f.clients = append(f.clients, c)
	}
	for w := range workers {
		keys := make([]string, 64)
		for k := range keys {
			keys[k] = fmt.Sprintf("floor%d-w%d-k%d", f.run, w, k)
		}
		f.keys = append(f.keys, keys)
	}
	return f
}

func (f *floor) close() {
	for _, c := range f.clients {
		_ = c.Close()
	}
}

// step sends step i's commands to every node in parallel and returns the
// workers that got a wrong reply (or an error) on some node, one bit each.
func (f *floor) step(ctx context.Context, i int) uint64 {
	tokens := make([]string, len(f.keys))
	for w := range tokens {
		tokens[w] = "floor-" + strconv.FormatInt(f.run, 36) + "-" + strconv.Itoa(i) + "-" + strconv.Itoa(w)
	}
	var bad atomic.Uint64
	var wg sync.WaitGroup
	for _, c := range f.clients {
		wg.Go(func() {
			if f.scripted {
				bad.Or(f.scriptNode(ctx, c, i, tokens))
			} else {
				bad.Or(f.node(ctx, c, i, tokens))
			}
		})
	}
	wg.Wait()
	return bad.Load()
}

// runFloor runs floor name in scenario sc (its workers, distinct keys):
// warm-up, then the measured window, then close, like runOne. A worker's
// cycle time is the step's.
func runFloor(ctx context.Context, name string, sc scenario, addrs []string, srvs []*server, warm, dur time.Duration) (result, error) {
	runtime.GC()
	baseG := runtime.NumGoroutine()
	f := newFloor(addrs, sc.workers, name == scriptFloorName)
	var phase atomic.Int32
	var res result
	steps := newSampler(1<<15, 1)
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			p := phase.Load()
			if p == phaseStop {
				return
			}
			start := time.Now()
			bad := f.step(ctx, i)
			if p == phaseMeasure && phase.Load() == phaseMeasure {
				nb := int64(bits.OnesCount64(bad))
				res.cycles += int64(sc.workers) - nb
				res.errs += nb
				res.failures += nb
				steps.add(int64(time.Since(start)))
			}
			if bad != 0 {
				time.Sleep(time.Millisecond) // an error: do not spin
			}
		}
	})
	sleepCtx(ctx, warm)
	u0, err0 := readUsage(srvs)
	phase.Store(phaseMeasure)
	maxG := 0
	for end := u0.at.Add(dur); time.Now().Before(end) && ctx.Err() == nil; {
		sleepCtx(ctx, min(50*time.Millisecond, time.Until(end)))
		maxG = max(maxG, runtime.NumGoroutine())
	}
	phase.Store(phaseStop)
	u1, err1 := readUsage(srvs)
	wg.Wait()
	f.close()
	if err := errors.Join(ctx.Err(), err0, err1); err != nil {
		return res, err
	}
	res.perCycle(u0, u1)
	res.cycleP50, res.cycleP99 = percentiles([]*sampler{steps})
	res.goroutines = maxG - baseG
	res.leftover = settled(baseG)
	return res, nil
}

// settled waits up to 3 s for the goroutines to be back to base and returns
// how many are above it.
func settled(base int) int {
	left := runtime.NumGoroutine() - base
	for deadline := time.Now().Add(3 * time.Second); left > 0 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		left = runtime.NumGoroutine() - base
	}
	return max(left, 0)
}

// floorCmds are one worker's commands on one node in one step.
type floorCmds struct {
	get1 *redis.StringCmd // nil: the key is free
	set  *redis.StatusCmd // OK
	get2 *redis.StringCmd // our token
	del  *redis.IntCmd    // 1
	pub  *redis.IntCmd    // no error (the count of subscribers: none)
}

// node sends one pipeline of every worker's GET, SET PX, GET, DEL and
// PUBLISH to one node, and checks every reply.
func (f *floor) node(ctx context.Context, c *redis.Client, i int, tokens []string) uint64 {
	pipe := c.Pipeline()
	cmds := make([]floorCmds, len(f.keys))
	for w, keys := range f.keys {
		k := keys[i%len(keys)]
		cmds[w] = floorCmds{
			get1: pipe.Get(ctx, k),
			set:  pipe.Set(ctx, k, tokens[w], ttl),
			get2: pipe.Get(ctx, k),
			del:  pipe.Del(ctx, k),
			pub:  pipe.Publish(ctx, k, tokens[w]),
		}
	}
	_, _ = pipe.Exec(ctx) // the first GET's redis.Nil, or an error every command carries
	var bad uint64
	for w, cm := range cmds {
		ok := cm.get1.Err() == redis.Nil &&
			cm.set.Err() == nil && cm.set.Val() == "OK" &&
			cm.get2.Err() == nil && cm.get2.Val() == tokens[w] &&
			cm.del.Err() == nil && cm.del.Val() == 1 &&
			cm.pub.Err() == nil
		if !ok {
			bad |= 1 << w
			if *verbose && debugErrs.Add(1) <= 3 {
				fmt.Fprintln(os.Stderr, "floor: wrong reply:", cm.get1.Err(), cm.set, cm.get2, cm.del, cm.pub)
			}
		}
	}
	return bad
}

// scriptNode sends one node one pipeline of every worker's acquire script,
// then, once it is answered, one of their release scripts, and checks
// every reply.
func (f *floor) scriptNode(ctx context.Context, c *redis.Client, i int, tokens []string) uint64 {
	var bad uint64
	for _, sc := range []*redis.Script{floorAcquire, floorRelease} {
		pipe := c.Pipeline()
		cmds := make([]*redis.Cmd, len(f.keys))
		for w, keys := range f.keys {
			args := []any{tokens[w]}
			if sc == floorAcquire {
				args = append(args, ttl.Milliseconds())
			}
			cmds[w] = sc.EvalSha(ctx, pipe, []string{keys[i%len(keys)]}, args...)
		}
		_, _ = pipe.Exec(ctx)
		for w, cm := range cmds {
			if n, err := cm.Int(); err != nil || n != 1 {
				bad |= 1 << w
				if *verbose && debugErrs.Add(1) <= 3 {
					fmt.Fprintln(os.Stderr, "script floor: wrong reply:", cm)
				}
			}
		}
	}
	return bad
}

// usage is what the process and the servers have used up to a moment.
type usage struct {
	mem   runtime.MemStats
	ru    syscall.Rusage
	srv   time.Duration
	reads int64 // the servers'
	at    time.Time
}

func readUsage(srvs []*server) (usage, error) {
	var u usage
	runtime.ReadMemStats(&u.mem)
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &u.ru)
	var err error
	u.srv, err = serversCPU(srvs)
	if err == nil {
		u.reads, err = serversReads(srvs)
	}
	u.at = time.Now()
	return u, err
}

// perCycle fills res's throughput and per-cycle costs from the usage at the
// window's start and end.
func (res *result) perCycle(u0, u1 usage) {
	res.tput = float64(res.cycles) / u1.at.Sub(u0.at).Seconds()
	if res.cycles == 0 {
		return
	}
	c := float64(res.cycles)
	res.allocs = float64(u1.mem.Mallocs-u0.mem.Mallocs) / c
	res.bytes = float64(u1.mem.TotalAlloc-u0.mem.TotalAlloc) / c
	cpu := time.Duration(u1.ru.Utime.Nano() + u1.ru.Stime.Nano() - u0.ru.Utime.Nano() - u0.ru.Stime.Nano())
	res.cpu = cpu / time.Duration(res.cycles)
	res.srvCPU = (u1.srv - u0.srv) / time.Duration(res.cycles)
	res.srvReads = float64(u1.reads-u0.reads) / c
}
