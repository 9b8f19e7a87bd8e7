package main

// The starved scenario (issue 11): timeout storms under a starved client.
//
// 16 workers do TryLock + Release on distinct keys (as in w16) against the 5
// servers, in a child process of this command that runs at nice +15
// (re-exec'd through nice(1), so every thread the Go runtime ever creates in
// it inherits the niceness; the child checks all its threads before it
// starts). The parent, the redis-server processes and the burners keep the
// parent's own priority. Per implementation, one child, one timeline:
//
//	warm-up │ baseline (no burners) │ starvation (N burners spin) │ recovery (burners killed)
//	        t0                      burn start                    burn stop                  end
//
// The child counts completed cycles per 10 ms bucket from t0, and its
// connections' dials and closes (starvedconns.go), and hands the buckets
// back on stdout when told to stop; the parent times the phases and also
// counts new server connections (INFO stats total_connections_received on
// every server, less the parent's own). Each worker locks a key of its own,
// as the overload harness of issue 32 does (../shared/bench-overload).

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	starvedID      = "starved"
	starvedWorkers = 16
	bucket         = 10 * time.Millisecond // the overload harness's resolution
	recoverWindow  = 50                    // buckets (500 ms) whose mean must be back to recoverShare of the baseline
	recoverShare   = 0.8                   // of the baseline rate
	targetZero     = 1500 * time.Millisecond
	targetRecover  = 2 * time.Second
)

// starvedCfg is the starved scenario's timeline and load.
type starvedCfg struct {
	warm, base, starve, recover time.Duration
	burners, nice               int
}

// childOut is what the client child reports on stdout when it stops.
type childOut struct {
	Cycles  []int64 `json:"cycles"`  // completed TryLock + Release per bucket since t0
	Fails   []int64 `json:"fails"`   // TryLock calls that did not get the lock, no error (taken, or too few nodes in time)
	Errs    []int64 `json:"errs"`    // TryLock calls that returned an error
	RelErrs []int64 `json:"relErrs"` // Release calls that returned an error (the cycle still counts)
	Nice    int     `json:"nice"`    // niceness of all the child's threads at start

	// The client's connections, per bucket (starvedconns.go): dials,
	// failed dials, closes, and closes before 1,000 bytes were read;
	// and the dials and closes before t0.
	Dials, DialErrs, Closed, ClosedEarly []int64
	SetupDials, SetupClosed              int64
}

// starvedRun is one implementation's run and what it measured.
type starvedRun struct {
	impl                  string
	out                   childOut
	burnStart, burnStop   time.Duration // since t0
	end                   time.Duration // since t0: the parent told the child to stop
	connsSetup, connsBase int64         // new server connections: set-up + warm-up, baseline
	connsStarve, connsRec int64         // during starvation, during recovery
	closedStarve          int64         // connections the client closed during starvation and recovery (client side)
	closedEarly           int64         // … of which before 1,000 bytes were read (during set-up)
	keysLeft              int64         // the client's keys on the servers once it closed
	dialErrs              int64         // dials that failed during starvation and recovery
	burnCPU               time.Duration // CPU the burners used (user + system)

	baseRate, starveRate float64
	longestZero          time.Duration // longest stretch of empty buckets from burn start to end
	emptyStarve, nStarve int           // empty buckets and buckets under starvation
	recovery             time.Duration // -1: not back within the recovery phase
	fails, errs, relErrs int64         // under starvation
}

// redials counts the connections the client closed from the start of
// starvation to the end of recovery, as counted on the client's side.
func (r *starvedRun) redials() int64 { return r.closedStarve }

// newConns counts every new server connection from the start of starvation
// to the end of recovery: re-dials and pool growth.
func (r *starvedRun) newConns() int64 { return r.connsStarve + r.connsRec }

// analyze computes the figures from the buckets and the phase times.
func (r *starvedRun) analyze() {
	c := r.out.Cycles
	idx := func(d time.Duration, up bool) int { // bucket boundary at or after (up) or before d
		i := int(d / bucket)
		if up && time.Duration(i)*bucket < d {
			i++
		}
		return min(max(i, 0), len(c))
	}
	sum := func(v []int64, from, to int) (s int64) {
		for _, x := range v[from:max(from, to)] {
			s += x
		}
		return s
	}
	rate := func(from, to int) float64 {
		if to <= from {
			return 0
		}
		return float64(sum(c, from, to)) / (time.Duration(to-from) * bucket).Seconds()
	}
	b0, b1 := 0, idx(r.burnStart, false)
	s0, s1 := idx(r.burnStart, true), idx(r.burnStop, false)
	r0, r1 := idx(r.burnStop, false), idx(r.end, false)
	r.baseRate, r.starveRate = rate(b0, b1), rate(s0, s1)
	r.nStarve = max(s1-s0, 0)
	for _, x := range c[s0:max(s0, s1)] {
		if x == 0 {
			r.emptyStarve++
		}
	}
	run := 0
	for _, x := range c[s0:max(s0, r1)] {
		if x == 0 {
			run++
			r.longestZero = max(r.longestZero, time.Duration(run)*bucket)
		} else {
			run = 0
		}
	}
	r.fails, r.errs, r.relErrs = sum(r.out.Fails, s0, s1), sum(r.out.Errs, s0, s1), sum(r.out.RelErrs, s0, s1)
	r.closedStarve, r.closedEarly, r.dialErrs = sum(r.out.Closed, s0, r1), sum(r.out.ClosedEarly, s0, r1), sum(r.out.DialErrs, s0, r1)
	want := recoverShare * r.baseRate * bucket.Seconds() * recoverWindow
	r.recovery = -1
	for i := r0; i+recoverWindow <= r1; i++ {
		if float64(sum(c, i, i+recoverWindow)) >= want {
			r.recovery = max(0, time.Duration(i)*bucket-r.burnStop)
			break
		}
	}
}

// perSecond is the cycles of each second since t0, for the progress lines.
func (r *starvedRun) perSecond() string {
	var b strings.Builder
	per := int(time.Second / bucket)
	marks := map[int]string{int(r.burnStart / time.Second): "[burn] ", int(r.burnStop / time.Second): "[stop] "}
	for s := 0; s*per < int(r.end/bucket); s++ {
		b.WriteString(marks[s])
		var n int64
		for _, x := range r.out.Cycles[s*per : min((s+1)*per, len(r.out.Cycles))] {
			n += x
		}
		fmt.Fprintf(&b, "%d ", n)
	}
	return strings.TrimSpace(b.String())
}

// connCounter reads every server's total_connections_received and
// connected_clients over one connection per server of its own, and subtracts
// its own.
type connCounter struct {
	clients []*redis.Client
	own     atomic.Int64
}

func newConnCounter(addrs []string) *connCounter {
	cc := &connCounter{}
	for _, a := range addrs {
		cc.clients = append(cc.clients, redis.NewClient(&redis.Options{Addr: a, PoolSize: 1,
			OnConnect: func(context.Context, *redis.Conn) error { cc.own.Add(1); return nil }}))
	}
	return cc
}

// connCount is the servers' connections, less the counter's own.
type connCount struct{ received, open int64 }

func (cc *connCounter) total(ctx context.Context) (connCount, error) {
	var n connCount
	for _, c := range cc.clients {
		s, err := c.Info(ctx, "stats", "clients").Result()
		if err != nil {
			return n, fmt.Errorf("INFO on %s: %w", c.Options().Addr, err)
		}
		v, ok := infoField(s, "total_connections_received")
		o, ok2 := infoField(s, "connected_clients")
		if !ok || !ok2 {
			return n, fmt.Errorf("no total_connections_received or connected_clients in INFO of %s", c.Options().Addr)
		}
		n.received += v
		n.open += o - 1 // the counter's own connection
	}
	n.received -= cc.own.Load()
	return n, nil
}

// keys counts the keys matching pattern on every server.
func (cc *connCounter) keys(ctx context.Context, pattern string) (int64, error) {
	var n int64
	for _, c := range cc.clients {
		it := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for it.Next(ctx) {
			n++
		}
		if err := it.Err(); err != nil {
			return 0, fmt.Errorf("SCAN on %s: %w", c.Options().Addr, err)
		}
	}
	return n, nil
}

func (cc *connCounter) close() {
	for _, c := range cc.clients {
		_ = c.Close()
	}
}

func infoField(info, name string) (int64, bool) {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// runStarved runs the starved scenario for each implementation in turn
// against the servers and returns the report.
func runStarved(ctx context.Context, srvs []*server, names []string, cfg starvedCfg) (string, error) {
	addrs := make([]string, len(srvs))
	for i, s := range srvs {
		addrs[i] = s.addr
	}
	myNice, err := niceOf(os.Getpid())
	if err != nil {
		return "", err
	}
	want := min(myNice+cfg.nice, 19)
	fmt.Fprintf(os.Stderr, "starved: %d workers in a child at nice %d (servers and burners at %d), %d burners on %d CPUs; %v baseline, %v starved, %v recovery per implementation (+%v warm-up)\n",
		starvedWorkers, want, myNice, cfg.burners, runtime.NumCPU(), cfg.base, cfg.starve, cfg.recover, cfg.warm)
	cc := newConnCounter(addrs)
	defer cc.close()
	var runs []*starvedRun
	for _, name := range names {
		r, err := starvedOne(ctx, name, addrs, cfg, want, cc)
		if err != nil {
			return "", fmt.Errorf("%s/%s: %w", starvedID, name, err)
		}
		r.analyze()
		runs = append(runs, r)
		rec := "not back"
		if r.recovery >= 0 {
			rec = r.recovery.String()
		}
		fmt.Fprintf(os.Stderr, "starved %-10s base %6.0f/s  starved %6.1f/s  longest zero %v  closed conns %d  recovery %s  burners used %.1f CPU-s\n  per second: %s\n",
			name, r.baseRate, r.starveRate, r.longestZero, r.redials(), rec, r.burnCPU.Seconds(), r.perSecond())
	}
	return starvedMarkdown(runs, cfg, want, myNice, len(addrs)), nil
}

// starvedOne runs one implementation's child through the timeline.
func starvedOne(ctx context.Context, name string, addrs []string, cfg starvedCfg, wantNice int, cc *connCounter) (*starvedRun, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	nicePath, err := exec.LookPath("nice")
	if err != nil {
		return nil, fmt.Errorf("nice(1) is needed to start the client at lower priority: %w", err)
	}
	r := &starvedRun{impl: name}
	pre, err := cc.total(ctx)
	if err != nil {
		return nil, err
	}
	maxRun := cfg.base + cfg.starve + cfg.recover + time.Minute // the child's bucket range
	cmd := exec.Command(nicePath, "-n", strconv.Itoa(cfg.nice), exe, "-starved-child",
		"-starved-impl", name, "-starved-addrs", strings.Join(addrs, ","),
		"-warm", cfg.warm.String(), "-starved-max", maxRun.String(), "-starved-nice", strconv.Itoa(wantNice))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	exited := false
	defer func() { // on any early return: kill the child by pid and reap it
		if !exited {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()
	type line struct {
		s   string
		err error
	}
	lines := make(chan line, 2)
	go func() { // the "ready" line, then the result; ends when the child's stdout closes
		rd := bufio.NewReader(stdout)
		s, err := rd.ReadString('\n')
		lines <- line{s, err}
		if err != nil {
			return
		}
		b, err := io.ReadAll(rd)
		lines <- line{string(b), err}
	}()
	next := func(timeout time.Duration) (string, error) {
		select {
		case l := <-lines:
			return l.s, l.err
		case <-time.After(timeout):
			return "", errors.New("the client child did not answer in time")
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	ready, err := next(cfg.warm + 30*time.Second)
	if err != nil {
		return nil, fmt.Errorf("waiting for the child to be ready: %w", err)
	}
	ns, ok := strings.CutPrefix(strings.TrimSpace(ready), "ready ")
	t0n, err := strconv.ParseInt(ns, 10, 64)
	if !ok || err != nil {
		return nil, fmt.Errorf("the child said %q, want \"ready <t0>\"", ready)
	}
	t0 := time.Unix(0, t0n)
	since := func() time.Duration { return time.Since(t0) } // wall clock: t0 comes from the child

	c0, err := cc.total(ctx)
	if err != nil {
		return nil, err
	}
	r.connsSetup = c0.received - pre.received
	sleepCtx(ctx, cfg.base-since())
	c1, err := cc.total(ctx)
	if err != nil {
		return nil, err
	}
	r.connsBase = c1.received - c0.received
	b, err := startBurners(exe, cfg.burners, cfg.starve+time.Minute)
	if err != nil {
		return nil, err
	}
	r.burnStart = since()
	sleepCtx(ctx, cfg.starve)
	r.burnCPU = b.stop()
	r.burnStop = since()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	c2, err := cc.total(ctx)
	if err != nil {
		return nil, err
	}
	r.connsStarve = c2.received - c1.received
	sleepCtx(ctx, cfg.recover)
	c3, err := cc.total(ctx)
	if err != nil {
		return nil, err
	}
	r.connsRec = c3.received - c2.received
	r.end = since()
	if _, err := io.WriteString(stdin, "stop\n"); err != nil {
		return nil, err
	}
	res, err := next(30 * time.Second)
	if err != nil {
		return nil, fmt.Errorf("waiting for the child's result: %w", err)
	}
	werr := cmd.Wait()
	exited = true
	if werr != nil {
		return nil, fmt.Errorf("client child: %w", werr)
	}
	if r.keysLeft, err = cc.keys(ctx, fmt.Sprintf("*starved-%s-%d-*", name, cmd.Process.Pid)); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(res), &r.out); err != nil {
		return nil, fmt.Errorf("the child's result: %w", err)
	}
	if r.out.Nice != wantNice {
		return nil, fmt.Errorf("the child ran at nice %d, want %d", r.out.Nice, wantNice)
	}
	return r, nil
}

// burners are busy-loop processes (this command re-exec'd with -burn), one
// thread each spinning.
type burners struct{ cmds []*exec.Cmd }

func startBurners(exe string, n int, max time.Duration) (*burners, error) {
	b := &burners{}
	for range n {
		cmd := exec.Command(exe, "-burn", "-burn-max", max.String())
		cmd.Stdout, cmd.Stderr = io.Discard, os.Stderr
		// A pipe on stdin that nobody writes: when this process dies
		// without killing them, the burners see EOF and exit.
		if _, err := cmd.StdinPipe(); err != nil {
			b.stop()
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			b.stop()
			return nil, err
		}
		b.cmds = append(b.cmds, cmd)
	}
	return b, nil
}

// stop kills every burner by pid, reaps them and returns the CPU they used.
func (b *burners) stop() time.Duration {
	for _, c := range b.cmds {
		_ = c.Process.Kill()
	}
	var cpu time.Duration
	for _, c := range b.cmds {
		_ = c.Wait()
		if ru, ok := c.ProcessState.SysUsage().(*syscall.Rusage); ok {
			cpu += time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		}
	}
	b.cmds = nil
	return cpu
}

var burnSink atomic.Uint64

// burn spins one goroutine until killed, until its stdin closes, or for at
// most max.
func burn(max time.Duration) {
	runtime.GOMAXPROCS(1)
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); os.Exit(0) }()
	time.AfterFunc(max, func() { os.Exit(0) })
	var n uint64
	for {
		n++
		if n&(1<<24-1) == 0 {
			burnSink.Store(n)
		}
	}
}

// niceOf returns the niceness of a process's main thread.
func niceOf(pid int) (int, error) {
	return statNice(fmt.Sprintf("/proc/%d/stat", pid))
}

func statNice(path string) (int, error) {
	f, err := procStat(path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(f[16]) // field 19, nice
}

// threadNices returns the niceness of every thread of this process.
func threadNices() ([]int, error) {
	paths, err := filepath.Glob("/proc/self/task/*/stat")
	if err != nil || len(paths) == 0 {
		return nil, fmt.Errorf("cannot list this process's threads in /proc: %v", err)
	}
	var ns []int
	for _, p := range paths {
		n, err := statNice(p)
		if err != nil {
			if os.IsNotExist(err) { // the thread ended meanwhile
				continue
			}
			return nil, err
		}
		ns = append(ns, n)
	}
	return ns, nil
}

// starvedChild is the client process: 16 workers on distinct keys, counting
// per bucket from the end of the warm-up until "stop" arrives on stdin.
func starvedChild(name, addrList string, warm, maxRun time.Duration, wantNice int) error {
	ns, err := threadNices()
	if err != nil {
		return err
	}
	for _, n := range ns {
		if n != wantNice {
			return fmt.Errorf("starved child: a thread runs at nice %d, want %d (all: %v)", n, wantNice, ns)
		}
	}
	var mk func([]string) (impl, error)
	for _, im := range impls {
		if im.name == name {
			mk = im.new
		}
	}
	if mk == nil {
		return fmt.Errorf("starved child: no implementation %q", name)
	}
	nb := int(maxRun / bucket)
	type counts struct{ cycles, fails, errs, relErrs []int64 }
	ws := make([]*counts, starvedWorkers)
	var t0 atomic.Pointer[time.Time] // nil during the warm-up
	at := func() int {               // the bucket of now, -1 outside the measured range
		p := t0.Load()
		if p == nil {
			return -1
		}
		if i := int(time.Since(*p) / bucket); i < nb {
			return i
		}
		return -1
	}
	events := newConnEvents(nb, at)
	connDialer = events.dialer()
	im, err := mk(strings.Split(addrList, ","))
	if err != nil {
		return err
	}
	var stop atomic.Bool
	wctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for w := range starvedWorkers {
		c := &counts{make([]int64, nb), make([]int64, nb), make([]int64, nb), make([]int64, nb)}
		ws[w] = c
		// One key per worker, as the overload harness: a key a failed
		// release left behind holds its worker up until the key expires.
		keys := []string{fmt.Sprintf("starved-%s-%d-w%d", name, os.Getpid(), w)}
		s := im.session()
		wg.Go(func() {
			for k := 0; !stop.Load(); k++ {
				ok, err := s.tryLock(wctx, keys[k%len(keys)])
				if !ok {
					if wctx.Err() != nil {
						return
					}
					if i := at(); i >= 0 {
						if err != nil {
							c.errs[i]++
						} else {
							c.fails[i]++
						}
					}
					if err != nil {
						if *verbose && debugErrs.Add(1) <= 3 {
							fmt.Fprintln(os.Stderr, "lock:", err)
						}
						time.Sleep(time.Millisecond) // an error, not contention: do not spin
					}
					continue
				}
				uerr := s.unlock(context.Background())
				if i := at(); i >= 0 {
					c.cycles[i]++
					if uerr != nil {
						c.relErrs[i]++
					}
				}
				if uerr != nil && *verbose && debugErrs.Add(1) <= 3 {
					fmt.Fprintln(os.Stderr, "unlock:", uerr)
				}
			}
		})
	}
	time.Sleep(warm)
	now := time.Now()
	t0.Store(&now)
	fmt.Printf("ready %d\n", now.UnixNano())

	in := bufio.NewScanner(os.Stdin)
	stopped := false
	for in.Scan() {
		if in.Text() == "stop" {
			stopped = true
			break
		}
	}
	if !stopped { // the parent went away
		os.Exit(1)
	}
	stop.Store(true)
	cancel()
	wg.Wait()
	im.close()

	out := childOut{Cycles: make([]int64, nb), Fails: make([]int64, nb), Errs: make([]int64, nb), RelErrs: make([]int64, nb), Nice: wantNice}
	events.snapshot(&out)
	for _, c := range ws {
		for i := range nb {
			out.Cycles[i] += c.cycles[i]
			out.Fails[i] += c.fails[i]
			out.Errs[i] += c.errs[i]
			out.RelErrs[i] += c.relErrs[i]
		}
	}
	return json.NewEncoder(os.Stdout).Encode(&out)
}

// human writes a duration as "5 s" or "100 ms" when it is whole.
func human(d time.Duration) string {
	switch {
	case d%time.Second == 0:
		return fmt.Sprintf("%d s", d/time.Second)
	case d%time.Millisecond == 0:
		return fmt.Sprintf("%d ms", d/time.Millisecond)
	}
	return d.String()
}

// starvedMarkdown renders the targets and the per-implementation figures.
func starvedMarkdown(runs []*starvedRun, cfg starvedCfg, clientNice, serverNice, nodes int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "#### 16 workers, distinct keys, client starved (`%s`)\n\n", starvedID)
	fmt.Fprintf(&b, "One run per implementation, one after the other: %s warm-up, %s unstarved baseline, %s with %d busy-loop burner processes, %s recovery after they are killed. "+
		"The client process runs at nice %d, the redis-server processes and the burners at nice %d; %d CPUs. Throughput is counted per %s bucket; "+
		"recovery is the time from the burners' end to the first %s window whose rate is back to %.0f %% of the baseline.\n\n",
		human(cfg.warm), human(cfg.base), human(cfg.starve), cfg.burners, human(cfg.recover), clientNice, serverNice, runtime.NumCPU(), human(bucket),
		human(recoverWindow*bucket), recoverShare*100)

	get := func(name string) *starvedRun {
		if i := slices.IndexFunc(runs, func(r *starvedRun) bool { return r.impl == name }); i >= 0 {
			return runs[i]
		}
		return nil
	}
	o, rs := get(oursName), get(base)
	secs := func(d time.Duration) string { return fmt.Sprintf("%.1f", d.Seconds()) }
	recov := func(r *starvedRun) string {
		if r.recovery < 0 {
			return fmt.Sprintf("> %s", secs(cfg.recover))
		}
		return secs(r.recovery)
	}

	b.WriteString("| target | measured | met |\n|---|---:|:---:|\n")
	line := func(name string, known bool, got func() string, ok func() bool) {
		mark, g := "–", "not run"
		if known {
			g, mark = got(), "no"
			if ok() {
				mark = "yes"
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", name, g, mark)
	}
	vs := func(f func(r *starvedRun) string) string {
		if rs == nil {
			return f(o)
		}
		return fmt.Sprintf("%s (redsync %s)", f(o), f(rs))
	}
	line(fmt.Sprintf("longest zero-throughput stretch ≤ %s and ≤ redsync's", human(targetZero)), o != nil,
		func() string {
			return vs(func(r *starvedRun) string { return fmt.Sprintf("%.2f s", r.longestZero.Seconds()) })
		},
		func() bool { return o.longestZero <= targetZero && (rs == nil || o.longestZero <= rs.longestZero) })
	line("connections closed by the client, starvation + recovery = 0", o != nil,
		func() string { return vs(func(r *starvedRun) string { return strconv.FormatInt(r.redials(), 10) }) },
		func() bool { return o.redials() == 0 })
	line("rate under starvation ≥ redsync's", o != nil && rs != nil,
		func() string {
			return fmt.Sprintf("%s (%.1f vs %.1f cycles/s)", ratio(o.starveRate, rs.starveRate), o.starveRate, rs.starveRate)
		},
		func() bool { return o.starveRate >= rs.starveRate })
	line(fmt.Sprintf("back to ≥ %.0f %% of the unstarved rate within %s of the burners stopping", recoverShare*100, human(targetRecover)), o != nil,
		func() string { return vs(func(r *starvedRun) string { return recov(r) + " s" }) },
		func() bool { return o.recovery >= 0 && o.recovery <= targetRecover })

	b.WriteString("\n| metric |")
	for _, r := range runs {
		fmt.Fprintf(&b, " %s |", r.impl)
	}
	for _, r := range runs {
		if r.impl != base && rs != nil {
			fmt.Fprintf(&b, " %s ÷ redsync |", r.impl)
		}
	}
	b.WriteString("\n|---|")
	for _, r := range runs {
		b.WriteString("---:|")
		if r.impl != base && rs != nil {
			b.WriteString("---:|")
		}
	}
	b.WriteString("\n")
	row := func(name string, val func(*starvedRun) float64, format func(*starvedRun) string) {
		fmt.Fprintf(&b, "| %s |", name)
		for _, r := range runs {
			fmt.Fprintf(&b, " %s |", format(r))
		}
		for _, r := range runs {
			if r.impl != base && rs != nil {
				fmt.Fprintf(&b, " %s |", ratio(val(r), val(rs)))
			}
		}
		b.WriteString("\n")
	}
	num := func(f func(*starvedRun) float64) (func(*starvedRun) float64, func(*starvedRun) string) {
		return f, func(r *starvedRun) string { return fmt.Sprintf("%.0f", f(r)) }
	}
	v, s := num(func(r *starvedRun) float64 { return r.baseRate })
	row("unstarved cycles/s (baseline)", v, s)
	v, s = num(func(r *starvedRun) float64 { return r.starveRate })
	row("mean cycles/s under starvation", v, s)
	row("under starvation ÷ unstarved", func(r *starvedRun) float64 { return r.starveRate / r.baseRate },
		func(r *starvedRun) string { return fmt.Sprintf("%.3f", r.starveRate/max(r.baseRate, 1e-9)) })
	row("longest zero-throughput stretch (s)", func(r *starvedRun) float64 { return r.longestZero.Seconds() },
		func(r *starvedRun) string { return fmt.Sprintf("%.2f", r.longestZero.Seconds()) })
	row("empty buckets under starvation", func(r *starvedRun) float64 { return float64(r.emptyStarve) },
		func(r *starvedRun) string { return fmt.Sprintf("%d of %d", r.emptyStarve, r.nStarve) })
	v, s = num(func(r *starvedRun) float64 { return float64(r.redials()) })
	row("connections closed by the client, starvation + recovery", v, s)
	v, s = num(func(r *starvedRun) float64 { return float64(r.closedEarly) })
	row("… of which during their set-up (< 1,000 bytes read)", v, s)
	v, s = num(func(r *starvedRun) float64 { return float64(r.dialErrs) })
	row("failed dials, starvation + recovery", v, s)
	v, s = num(func(r *starvedRun) float64 { return float64(r.newConns()) })
	row("new server connections, starvation + recovery (re-dials and pool growth)", v, s)
	v, s = num(func(r *starvedRun) float64 { return float64(r.connsStarve) })
	row("… of which during starvation", v, s)
	v, s = num(func(r *starvedRun) float64 { return float64(r.connsSetup + r.connsBase) })
	row("connections at set-up, warm-up and baseline", v, s)
	row(fmt.Sprintf("recovery to ≥ %.0f %% of unstarved (s)", recoverShare*100), func(r *starvedRun) float64 { return max(r.recovery, 0).Seconds() }, recov)
	v, s = num(func(r *starvedRun) float64 { return float64(r.keysLeft) })
	row("keys of the client left on the servers once it closed", v, s)
	v, s = num(func(r *starvedRun) float64 { return float64(r.fails) })
	row("TryLock not acquired under starvation (no error)", v, s)
	v, s = num(func(r *starvedRun) float64 { return float64(r.errs) })
	row("TryLock errors under starvation", v, s)
	v, s = num(func(r *starvedRun) float64 { return float64(r.relErrs) })
	row("Release errors under starvation", v, s)
	row("CPU-s the burners used", func(r *starvedRun) float64 { return r.burnCPU.Seconds() },
		func(r *starvedRun) string { return fmt.Sprintf("%.1f", r.burnCPU.Seconds()) })
	return b.String()
}
