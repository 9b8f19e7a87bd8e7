// Command bench runs quorumlock, go-redsync/redsync v4 and a plain go-redis
// round against the same 5 local Redis servers, interleaved, and prints the
// medians of each figure over the passes with ratios to redsync.
//
// It starts its own redis-server processes on free loopback ports (no
// persistence) and stops them at the end, also on Ctrl-C. Scenarios: 1 worker
// on distinct keys; 16 workers on distinct keys; 16 workers try-locking one
// key; 16 workers blocking on one key (hand-off); 16 workers on distinct keys
// with one node 2 ms slower (an in-process proxy delays its replies); N
// separate processes (-procs-n, child processes of this command) blocking on
// one key, quorumlock and redsync only (see procs.go); several keys as one
// lock (multi: TryLockAll against a lock per key taken in sorted order, over
// quorumlock and over redsync, for 2 and 8 keys; see multi.go); shared
// holders (shared: 16 readers on one key against 16 workers taking it alone
// and on keys of their own, and a writer beside 15 readers against the
// writer alone; see shared.go); counting semaphores (semaphore: 2k workers
// on a Semaphore of k permits against a Lock of one key; see semaphore.go);
// leader election failover (election: a leader in a child process killed or
// paused, the standby's wait; see election.go); Pools that are each a Redis
// Cluster (cluster: 3 clusters of 3 masters against 3 standalone masters and
// redsync; see cluster.go). In the
// 16-worker distinct-keys scenario (w16) a fourth implementation, floor,
// sends the same 25 server commands per cycle as quorumlock in plain go-redis
// pipelines, the yardstick of the total (client + servers) CPU per cycle
// (see floor.go).
//
//	go run ./cmd/bench -d 10s -passes 3 -md ../docs/performance.md -png ../docs/performance.png
//
//	go run ./cmd/bench -scenarios procs -d 3s -warm 1s -passes 1 # the procs scenario alone, quickly
//	go run ./cmd/bench -scenarios multi -passes 3 -md ../docs/performance.md # several keys alone (-multi-d per run)
//	go run ./cmd/bench -scenarios shared -passes 3 -md ../docs/performance.md # shared holders alone (-shared-d per run)
//	go run ./cmd/bench -scenarios semaphore,election -passes 3 -md ../docs/performance.md # semaphores (-sem-*) and failover (-election-*)
//
// The starved scenario (issue 11: timeout storms under a starved client) runs
// only when named, once per implementation (quorumlock and redsync unless
// -impls says otherwise), whatever -passes says: 16 workers on distinct keys
// in a child process at nice +15, an unstarved baseline, then -burners
// busy-loop processes for -starve-d, then a recovery phase (see starved.go).
//
//	go run ./cmd/bench -scenarios starved                                          # 60 s starved per implementation
//	go run ./cmd/bench -scenarios starved -starve-d 5s -starve-base 2s -starve-recover 4s # smoke test
//
// The held scenario (issue 12: holding many auto-renewed locks) also runs
// only when named: for each K of -held-k and each implementation
// (quorumlock, redsync), a child process acquires K locks and holds them for
// -held-d while they are renewed; then a fence check (see held.go).
//
//	go run ./cmd/bench -scenarios held -md ../docs/performance.md -png ../docs/held.png
//	go run ./cmd/bench -scenarios held -held-k 1000,10000 -held-d 10s # smoke test
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"
	"time"
)

var verbose = flag.Bool("v", false, "print the first errors of each kind")

func main() {
	dur := flag.Duration("d", 10*time.Second, "measured duration of each run")
	warm := flag.Duration("warm", time.Second, "warm-up before each run's measured window")
	passes := flag.Int("passes", 3, "interleaved passes over every scenario and implementation")
	only := flag.String("scenarios", "", "comma-separated scenario ids to run (w1,w16,try1,block1,slow,procs,multi,shared,semaphore,election,cluster,starved,held; multi-w1, multi-w16 and multi-ring are multi's parts, shared-read, shared-clients, shared-excl, shared-redsync, shared-own, shared-mixed and shared-writer shared's); empty: all but starved and held, which ignore -d and -passes (see -starve-* and -held-*)")
	which := flag.String("impls", "", "comma-separated implementations to run (quorumlock,redsync,raw,floor); empty: all (floor runs in w16 only)")
	bin := flag.String("redis-server", "redis-server", "the redis-server binary")
	md := flag.String("md", "", "write the results table into this Markdown file, between the bench markers")
	png := flag.String("png", "", "draw the chart into this PNG file (-scenarios held or procs alone: its chart; with other scenarios too, the held and procs charts go to the same name ending in -held.png and -procs.png)")
	var sc starvedCfg
	flag.DurationVar(&sc.starve, "starve-d", time.Minute, "starved: how long the burners run, per implementation")
	flag.DurationVar(&sc.base, "starve-base", 5*time.Second, "starved: the unstarved baseline before the burners start")
	flag.DurationVar(&sc.recover, "starve-recover", 10*time.Second, "starved: how long to watch the recovery after the burners stop")
	flag.IntVar(&sc.burners, "burners", 16, "starved: busy-loop burner processes")
	flag.IntVar(&sc.nice, "nice", 15, "starved: the client child runs at this much lower priority (nice -n) than the servers and burners")
	var hc heldCfg
	flag.StringVar(&hc.kList, "held-k", "1000,10000,50000,100000", "held: comma-separated numbers of locks to hold, a child process per number and implementation")
	flag.DurationVar(&hc.hold, "held-d", 60*time.Second, "held: how long each run holds (and renews) its locks")
	flag.DurationVar(&hc.acquireMax, "held-acquire-max", 2*time.Minute, "held: stop acquiring after this long and hold the locks acquired so far")
	var pc procsCfg
	flag.StringVar(&pc.nList, "procs-n", "2,4,16", "procs: comma-separated numbers of client processes blocking on one key")
	var mc multiCfg
	flag.StringVar(&mc.kList, "multi-k", "2,8", "multi: comma-separated numbers of keys per lock (at most 16)")
	flag.DurationVar(&mc.dur, "multi-d", 2*time.Second, "multi: measured duration of each run (at most -d)")
	var shc sharedCfg
	flag.StringVar(&shc.holdList, "shared-hold", "0s,1ms", "shared: comma-separated times each cycle holds the lock (shared-mixed and shared-writer always hold 1 ms)")
	flag.DurationVar(&shc.dur, "shared-d", 2*time.Second, "shared: measured duration of each run (at most -d)")
	// Internal: the procs scenario re-execs this command as its clients.
	procsChildFlag := flag.Bool("procs-child", false, "internal: run as one of the procs scenario's clients")
	procsImpl := flag.String("procs-impl", "", "internal")
	procsAddrs := flag.String("procs-addrs", "", "internal")
	procsKey := flag.String("procs-key", "", "internal")
	procsOutPath := flag.String("procs-out", "", "internal")
	var pt procsTimes
	flag.Int64Var(&pt.start, "procs-start", 0, "internal: CLOCK_MONOTONIC ns")
	flag.Int64Var(&pt.from, "procs-from", 0, "internal: CLOCK_MONOTONIC ns")
	flag.Int64Var(&pt.to, "procs-to", 0, "internal: CLOCK_MONOTONIC ns")
	// Internal: the held scenario re-execs this command as its client child.
	heldChildFlag := flag.Bool("held-child", false, "internal: run as the held scenario's client")
	heldImpl := flag.String("held-impl", "", "internal")
	heldAddrs := flag.String("held-addrs", "", "internal")
	heldN := flag.Int("held-n", 0, "internal")
	// Internal: the starved scenario re-execs this command as its client
	// child and as its burners.
	child := flag.Bool("starved-child", false, "internal: run as the starved scenario's client")
	childImpl := flag.String("starved-impl", "", "internal")
	childAddrs := flag.String("starved-addrs", "", "internal")
	childMax := flag.Duration("starved-max", 0, "internal")
	childNice := flag.Int("starved-nice", 0, "internal")
	burnFlag := flag.Bool("burn", false, "internal: spin as a starved-scenario burner")
	burnMax := flag.Duration("burn-max", time.Minute, "internal")
	flag.Parse()

	switch {
	case *burnFlag:
		burn(*burnMax)
		return
	case *child:
		if err := starvedChild(*childImpl, *childAddrs, *warm, *childMax, *childNice); err != nil {
			fmt.Fprintln(os.Stderr, "bench (starved client):", err)
			os.Exit(1)
		}
		return
	case *procsChildFlag:
		if err := procsChild(*procsImpl, *procsAddrs, *procsKey, *procsOutPath, pt); err != nil {
			fmt.Fprintln(os.Stderr, "bench (procs client):", err)
			os.Exit(1)
		}
		return
	case *electionChildFlag:
		if err := electionChild(*electionAddrs, *electionName, *electionFile, *electionTTL); err != nil {
			fmt.Fprintln(os.Stderr, "bench (election leader):", err)
			os.Exit(1)
		}
		return
	case *heldChildFlag:
		if err := heldChild(*heldImpl, *heldAddrs, *heldN, hc.hold, hc.acquireMax); err != nil {
			fmt.Fprintln(os.Stderr, "bench (held client):", err)
			os.Exit(1)
		}
		return
	}
	sc.warm = *warm
	// A closed stdout or stderr (bench | head) must not kill this process
	// before its deferred clean-up: with SIGPIPE caught, such writes just
	// fail, and the servers, burners and client child are still stopped.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *dur, *warm, *passes, *only, *which, *bin, *md, *png, sc, hc, pc, mc, shc); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, dur, warm time.Duration, passes int, only, which, bin, md, png string, sc starvedCfg, hc heldCfg, pc procsCfg, mc multiCfg, shc sharedCfg) error {
	scs := scenarios
	starved := slices.Contains(strings.Split(only, ","), starvedID)
	held := slices.Contains(strings.Split(only, ","), heldID)
	procs := only == "" || slices.Contains(strings.Split(only, ","), procsID)
	if only != "" {
		scs = nil
		for _, s := range scenarios {
			if slices.Contains(strings.Split(only, ","), s.id) {
				scs = append(scs, s)
			}
		}
	}
	ims := impls
	starvedImpls := []string{oursName, base}
	if which != "" {
		ims, starvedImpls = ims[:0:0], nil
		for _, im := range impls {
			if slices.Contains(strings.Split(which, ","), im.name) {
				ims = append(ims, im)
				if !isFloor(im.name) {
					starvedImpls = append(starvedImpls, im.name)
				}
			}
		}
	}
	mb, err := newMultiBench(only, starvedImpls, mc, dur)
	if err != nil {
		return err
	}
	sb, err := newSharedBench(only, starvedImpls, shc, dur)
	if err != nil {
		return err
	}
	semb, err := newSemBench(only, starvedImpls, dur)
	if err != nil {
		return err
	}
	eb, err := newElectionBench(only, starvedImpls)
	if err != nil {
		return err
	}
	cb := newClusterBench(only, starvedImpls)
	extra := semb != nil || eb != nil || cb != nil
	if (len(scs) == 0 && !starved && !held && !procs && mb == nil && sb == nil && !extra) || len(ims) == 0 || passes < 1 {
		return fmt.Errorf("nothing to run")
	}
	heldImpls, heldPNG, err := heldSetup(held, &hc, starvedImpls, png, len(scs) > 0 || procs)
	if err != nil {
		return err
	}
	pb, err := newProcsBench(procs, pc, starvedImpls, png, len(scs) > 0 || held)
	if err != nil {
		return err
	}
	if starved && (sc.starve <= 0 || sc.base < bucket*recoverWindow || sc.recover < bucket*recoverWindow || sc.burners < 1 || sc.nice < 1) {
		return fmt.Errorf("starved: -starve-d and -burners must be positive, -nice at least 1, -starve-base and -starve-recover at least %v", bucket*recoverWindow)
	}

	srvs, err := startServers(ctx, bin, 5)
	if err != nil {
		return err
	}
	defer stopServers(srvs)
	defer cb.close()
	if err := cb.start(ctx, bin); err != nil {
		return err
	}
	addrs := make([]string, len(srvs))
	for i, s := range srvs {
		addrs[i] = s.addr
	}
	if len(scs) > 0 || pb != nil || mb != nil || sb != nil || extra {
		fmt.Fprintf(os.Stderr, "bench: 5 redis-server on %s; %d pass(es) of %d scenario(s) × %d implementation(s), %v each (+%v warm-up)\n",
			strings.Join(addrs, " "), passes, len(scs), len(ims), dur, warm)
	}
	if pb != nil {
		fmt.Fprintf(os.Stderr, "bench: and procs: %v client processes blocking on one key, for %s\n", pb.cfg.ns, strings.Join(pb.impls, " and "))
	}
	if mb != nil {
		fmt.Fprintf(os.Stderr, "bench: and multi: %d workload(s) × %v keys × %d implementation(s), %v each (+%v warm-up)\n", len(mb.wls), mb.cfg.ks, len(mb.impls), mb.cfg.dur, warm)
	}
	if sb != nil {
		fmt.Fprintf(os.Stderr, "bench: and shared: %d run(s) (holds %v), %v each (+%v warm-up)\n", len(sb.plan()), sb.cfg.holds, sb.cfg.dur, warm)
	}
	if starved {
		text, err := runStarved(ctx, srvs, starvedImpls, sc)
		if err != nil {
			return err
		}
		text = environment(bin) + "\n" + text
		fmt.Println(text)
		if md != "" {
			if err := writeBetween(md, starvedBegin, starvedEnd, text); err != nil {
				return err
			}
		}
	}
	if held {
		if err := heldScenario(ctx, srvs, heldImpls, hc, environment(bin), md, heldPNG); err != nil {
			return err
		}
	}
	if len(scs) == 0 && pb == nil && mb == nil && sb == nil && !extra {
		return nil
	}

	all := map[string]map[string][]result{} // scenario → impl → per pass
	for p := range passes {
		for _, sc := range scs {
			if err := runScenario(ctx, p, sc, ims, addrs, srvs, warm, dur, all); err != nil {
				return err
			}
		}
		if err := pb.pass(ctx, p, srvs, warm, dur); err != nil {
			return err
		}
		if err := mb.pass(ctx, p, addrs, srvs, warm); err != nil {
			return err
		}
		if err := sb.pass(ctx, p, addrs, srvs, warm); err != nil {
			return err
		}
		if err := semb.pass(ctx, p, addrs, srvs, warm); err != nil {
			return err
		}
		if err := eb.pass(ctx, p, srvs); err != nil {
			return err
		}
		if err := cb.pass(ctx, p, srvs, warm, dur); err != nil {
			return err
		}
	}
	if len(scs) > 0 {
		var names []string
		for _, im := range ims {
			names = append(names, im.name)
		}
		if err := writeReport(all, names, scs, passes, dur, bin, md, png); err != nil {
			return err
		}
	}
	if err := pb.report(environment(bin), passes, warm, dur, md); err != nil {
		return err
	}
	if err := mb.report(environment(bin), passes, warm, md); err != nil {
		return err
	}
	if err := sb.report(environment(bin), passes, warm, md); err != nil {
		return err
	}
	if err := semb.report(environment(bin), passes, warm, md); err != nil {
		return err
	}
	if err := cb.report(environment(bin), passes, dur, md); err != nil {
		return err
	}
	return eb.report(environment(bin), passes, md)
}

// runScenario runs scenario sc in pass p with every implementation, in an
// order rotated by p, and adds the results to all.
func runScenario(ctx context.Context, p int, sc scenario, ims []implEntry, addrs []string, srvs []*server, warm, dur time.Duration, all map[string]map[string][]result) error {
	if sc.slow {
		px, err := newDelayProxy(addrs[0], 2*time.Millisecond)
		if err != nil {
			return err
		}
		defer px.close()
		addrs = append([]string{px.addr()}, addrs[1:]...)
	}
	for k := range ims {
		im := ims[(k+p)%len(ims)] // rotate who goes first
		if floorSkips(sc, im.name) {
			continue
		}
		var r result
		var err error
		if isFloor(im.name) {
			r, err = runFloor(ctx, im.name, sc, addrs, srvs, warm, dur)
		} else {
			r, err = runOne(ctx, sc, im.new, addrs, srvs, warm, dur)
		}
		if err != nil {
			return fmt.Errorf("%s/%s: %w", sc.id, im.name, err)
		}
		if all[sc.id] == nil {
			all[sc.id] = map[string][]result{}
		}
		all[sc.id][im.name] = append(all[sc.id][im.name], r)
		fmt.Fprintf(os.Stderr, "pass %d %-7s %-10s %8.0f cycles/s  acq p50 %-9v hand-off p50 %-9v %5.0f allocs  %6.0f B  cpu %v + servers %v  g+%d left %d  fail %d err %d\n",
			p+1, sc.id, im.name, r.tput, r.acqP50.Round(time.Microsecond), r.handP50.Round(time.Microsecond), r.allocs, r.bytes, r.cpu.Round(time.Microsecond), r.srvCPU.Round(time.Microsecond), r.goroutines, r.leftover, r.failures, r.errs)
	}
	return nil
}

// writeReport prints the medians of the in-process scenarios' runs and
// writes them where -md and -png say.
func writeReport(all map[string]map[string][]result, names []string, scs []scenario, passes int, dur time.Duration, bin, md, png string) error {
	rep := report{passes: passes, dur: dur, scs: scs, impls: names, meds: map[string]map[string]result{}}
	for id, byImpl := range all {
		rep.meds[id] = map[string]result{}
		for name, rs := range byImpl {
			rep.meds[id][name] = median(rs)
		}
	}
	rep.env = environment(bin)
	text := rep.markdown()
	fmt.Println(text)
	if md != "" {
		if err := writeBetweenMarkers(md, text); err != nil {
			return err
		}
	}
	if png != "" {
		if err := rep.chart(png); err != nil {
			return err
		}
	}
	return nil
}

// median takes each figure's median over the passes separately.
func median(rs []result) result {
	pick := func(f func(result) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		slices.Sort(v)
		if len(v)%2 == 1 {
			return v[len(v)/2]
		}
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	d := func(f func(result) time.Duration) time.Duration {
		return time.Duration(pick(func(r result) float64 { return float64(f(r)) }))
	}
	return result{
		cycles:     int64(pick(func(r result) float64 { return float64(r.cycles) })),
		failures:   int64(pick(func(r result) float64 { return float64(r.failures) })),
		errs:       int64(pick(func(r result) float64 { return float64(r.errs) })),
		tput:       pick(func(r result) float64 { return r.tput }),
		cycleP50:   d(func(r result) time.Duration { return r.cycleP50 }),
		cycleP99:   d(func(r result) time.Duration { return r.cycleP99 }),
		acqP50:     d(func(r result) time.Duration { return r.acqP50 }),
		acqP99:     d(func(r result) time.Duration { return r.acqP99 }),
		handP50:    d(func(r result) time.Duration { return r.handP50 }),
		handP99:    d(func(r result) time.Duration { return r.handP99 }),
		allocs:     pick(func(r result) float64 { return r.allocs }),
		bytes:      pick(func(r result) float64 { return r.bytes }),
		cpu:        d(func(r result) time.Duration { return r.cpu }),
		srvCPU:     d(func(r result) time.Duration { return r.srvCPU }),
		srvReads:   pick(func(r result) float64 { return r.srvReads }),
		goroutines: int(pick(func(r result) float64 { return float64(r.goroutines) })),
		leftover:   slices.MaxFunc(rs, func(a, b result) int { return a.leftover - b.leftover }).leftover, // worst, not median
	}
}

// environment describes the machine and versions for the report.
func environment(bin string) string {
	var b strings.Builder
	cpu := "unknown CPU"
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(data)) {
			if v, ok := strings.CutPrefix(line, "model name"); ok {
				cpu = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	fmt.Fprintf(&b, "- machine: %s/%s, %d CPUs (%s), GOMAXPROCS %d\n", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), cpu, runtime.GOMAXPROCS(0))
	fmt.Fprintf(&b, "- Go %s; ", runtime.Version())
	if bi, ok := debug.ReadBuildInfo(); ok {
		var deps []string
		for _, d := range bi.Deps {
			switch d.Path {
			case "github.com/redis/go-redis/v9", "github.com/go-redsync/redsync/v4":
				deps = append(deps, d.Path+" "+d.Version)
			}
		}
		b.WriteString(strings.Join(deps, ", "))
	}
	out, err := exec.Command(bin, "--version").Output()
	if err == nil {
		fmt.Fprintf(&b, "; %s", strings.TrimSpace(string(out)))
	}
	b.WriteString("\n")
	return b.String()
}

const (
	beginMarker = "<!-- bench:begin (written by bench/cmd/bench -md) -->"
	endMarker   = "<!-- bench:end -->"
	// The starved scenario has markers of its own, so that a run of it
	// alone leaves the other scenarios' results in place.
	starvedBegin = "<!-- bench-starved:begin (written by bench/cmd/bench -scenarios starved -md) -->"
	starvedEnd   = "<!-- bench-starved:end -->"
)

// writeBetweenMarkers replaces what lies between the markers in path (or
// appends both markers and text when the file has none).
func writeBetweenMarkers(path, text string) error {
	return writeBetween(path, beginMarker, endMarker, text)
}

func writeBetween(path, beginMarker, endMarker, text string) error {
	old, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	s := string(old)
	i, j := strings.Index(s, beginMarker), strings.Index(s, endMarker)
	block := beginMarker + "\n" + text + "\n" + endMarker
	if i >= 0 && j > i {
		s = s[:i] + block + s[j+len(endMarker):]
	} else {
		s += "\n" + block + "\n"
	}
	return os.WriteFile(path, []byte(s), 0o644)
}
