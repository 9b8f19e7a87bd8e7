package main

// The held scenario (issue 12): holding many auto-renewed locks.
//
// For each K of -held-k and each implementation, the parent flushes the 5
// servers and starts a child process (this command re-exec'd with
// -held-child), so that RSS and CPU are the run's own. The child acquires K
// distinct keys with 16 goroutines (TTL 3 s), each renewed the way the
// implementation's users renew: quorumlock with WithAutoExtend (the Client's
// renewal service, every TTL/3 = 1 s), redsync with one goroutine per mutex
// calling Extend every second. Then:
//
//	acquire │ settle, GC │ hold (renewals only)      │ check
//	        │            "acquired"                   "held"     "result"
//
// The child measures its RSS (VmRSS) before acquiring and after the settle,
// and its CPU (getrusage) over the hold; the parent measures the servers'
// CPU over the same window (utime + stime in /proc/<pid>/stat, between the
// child's "acquired" and "held" lines) and their memory after acquiring
// (INFO used_memory less the clients' buffers, less the same after the flush
// that follows the run). After the settle and at the end the child reads
// every key back from each server (pipelined GETs) and counts the locks whose
// value is on a quorum; for quorumlock it also counts the locks whose Err is
// not nil. The child exits without releasing; the parent flushes the servers.
//
// The scenario ends with the fence check (quorumlock only, in this process):
// 20,000 distinct keys acquired with WithFencing and released, then the keys
// left on the servers.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-redsync/redsync/v4"
	rsredis "github.com/go-redsync/redsync/v4/redis"
	rsgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redlock"
)

const (
	heldID      = "held"
	heldTTL     = 3 * time.Second
	heldWorkers = 16
	heldSettle  = time.Second
	heldChunk   = 1000 // GETs per pipeline in the check
	fenceKeys   = 20000

	targetHeldK     = 100000
	targetCPUK      = 50000
	targetCPU       = 5.0  // µs of client + server CPU per held lock-second
	targetRSS       = 2048 // bytes of client RSS per held lock
	targetFenceLeft = 0.001

	// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat
	// (100 on every Linux architecture Go supports).
	clockTicks = 100

	heldBegin = "<!-- bench-held:begin (written by bench/cmd/bench -scenarios held -md) -->"
	heldEnd   = "<!-- bench-held:end -->"
	// heldHeading opens the section when the Markdown file has no markers yet.
	heldHeading = "### Holding many locks (issue 12)"
)

// heldCfg is the held scenario's load and timeline.
type heldCfg struct {
	kList      string // -held-k
	ks         []int
	hold       time.Duration
	acquireMax time.Duration
}

func parseHeldK(s string) ([]int, error) {
	var ks []int
	for f := range strings.SplitSeq(s, ",") {
		k, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || k < 1 {
			return nil, fmt.Errorf("-held-k: %q is not a positive number of locks", f)
		}
		ks = append(ks, k)
	}
	return ks, nil
}

// heldSetup checks the held scenario's flags and picks its implementations
// (quorumlock and redsync, among those -impls names) and its chart's path
// (png, or png's name ending in -held.png when other scenarios draw there).
func heldSetup(held bool, cfg *heldCfg, names []string, png string, others bool) ([]string, string, error) {
	if !held {
		return nil, "", nil
	}
	var err error
	if cfg.ks, err = parseHeldK(cfg.kList); err != nil {
		return nil, "", err
	}
	if cfg.hold <= 0 || cfg.acquireMax <= 0 {
		return nil, "", errors.New("held: -held-d and -held-acquire-max must be positive")
	}
	var ims []string
	for _, n := range names {
		if n == oursName || n == base {
			ims = append(ims, n)
		}
	}
	if len(ims) == 0 {
		return nil, "", errors.New("held: -impls names neither quorumlock nor redsync")
	}
	if png != "" && others {
		png = strings.TrimSuffix(png, ".png") + "-held.png"
	}
	return ims, png, nil
}

// heldAcq is what the child reports once it has acquired the locks.
type heldAcq struct {
	Acquired    int     `json:"acquired"`    // K, unless -held-acquire-max ran out first
	AcquireSecs float64 `json:"acquireSecs"` // wall time to acquire them
	RSSBefore   int64   `json:"rssBefore"`   // VmRSS before acquiring (bytes)
	RSSAfter    int64   `json:"rssAfter"`    // VmRSS after acquiring, a settle and a GC
	Goroutines  int     `json:"goroutines"`  // after the settle
	HeldStart   int     `json:"heldStart"`   // locks whose value is on a quorum of servers, after the settle
}

// heldOut is what the child reports at the end.
type heldOut struct {
	HoldCPU    int64 `json:"holdCPU"`    // the child's user + system CPU during the hold (ns)
	RSSEnd     int64 `json:"rssEnd"`     // VmRSS at the end of the hold
	Held       int   `json:"held"`       // locks whose value is on a quorum of servers at the end
	ErrLost    int   `json:"errLost"`    // quorumlock: locks whose Err is not nil after the check; -1 for redsync
	RenewFails int64 `json:"renewFails"` // failed renewals over the whole run
}

// heldRun is one implementation's run at one K and what it measured.
type heldRun struct {
	impl      string
	k         int
	hold      time.Duration
	acq       heldAcq
	out       heldOut
	serverCPU time.Duration // the servers' CPU during the hold
	memDelta  int64         // Σ data memory after acquiring, less after the flush that follows the run
	keys      int64         // Σ DBSIZE after acquiring
}

// heldSecs is the lock-seconds held during the hold: the mean of the locks
// on a quorum at its start and at its end, times its length.
func (r *heldRun) heldSecs() float64 {
	return max(float64(r.acq.HeldStart+r.out.Held)/2, 1) * r.hold.Seconds()
}

func (r *heldRun) perLockSec(d time.Duration) float64 { return float64(d) / 1e3 / r.heldSecs() }
func (r *heldRun) clientUs() float64                  { return r.perLockSec(time.Duration(r.out.HoldCPU)) }
func (r *heldRun) serverUs() float64                  { return r.perLockSec(r.serverCPU) }
func (r *heldRun) totalUs() float64                   { return r.clientUs() + r.serverUs() }
func (r *heldRun) rssPerLock() float64 {
	return float64(r.acq.RSSAfter-r.acq.RSSBefore) / float64(max(r.acq.Acquired, 1))
}
func (r *heldRun) memPerLock() float64 { return float64(r.memDelta) / float64(max(r.keys, 1)) }

// lost counts the K locks not on a quorum at the end, including any never
// acquired.
func (r *heldRun) lost() int { return r.k - r.out.Held }

// ---- parent ----

// heldScenario runs the held scenario and the fence check, prints the
// report and writes it (and the chart) where -md and -png say.
func heldScenario(ctx context.Context, srvs []*server, names []string, cfg heldCfg, env, md, png string) error {
	runs, fr, err := runHeld(ctx, srvs, names, cfg)
	if err != nil {
		return err
	}
	text := env + "\n" + heldMarkdown(runs, fr, cfg, len(srvs))
	fmt.Println(text)
	if md != "" {
		if err := writeHeldMD(md, text); err != nil {
			return err
		}
	}
	if png != "" {
		return heldChart(runs, cfg.ks, names, png)
	}
	return nil
}

// writeHeldMD writes text between the held markers, opening the section
// first when the file has none.
func writeHeldMD(path, text string) error {
	return writeSection(path, heldHeading, heldBegin, heldEnd, text)
}

// writeSection writes text between the markers begin and end of the file
// at path, first appending heading and the markers when the file has none.
func writeSection(path, heading, begin, end, text string) error {
	old, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	if !strings.Contains(string(old), begin) {
		s := strings.TrimRight(string(old), "\n") + "\n\n" + heading + "\n"
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			return err
		}
	}
	return writeBetween(path, begin, end, text)
}

func runHeld(ctx context.Context, srvs []*server, names []string, cfg heldCfg) ([]*heldRun, *fenceRun, error) {
	adm := newRedisAdmin(srvs)
	defer adm.close()
	fmt.Fprintf(os.Stderr, "held: K = %v locks per run, %v hold (TTL %v, renewed every 1 s), a child process per run; %d CPUs\n",
		cfg.ks, cfg.hold, heldTTL, runtime.NumCPU())
	var runs []*heldRun
	for _, k := range cfg.ks {
		for _, name := range names {
			r, err := heldOne(ctx, name, k, srvs, adm, cfg)
			if err != nil {
				return nil, nil, fmt.Errorf("%s/%s/K=%d: %w", heldID, name, k, err)
			}
			runs = append(runs, r)
			fmt.Fprintf(os.Stderr, "held %-10s K=%-6d acquired %d in %.1f s, %d on a quorum at the hold's start  CPU/lock-s client %.2f µs server %.2f µs  RSS %.0f B/lock  Redis %.0f B/lock/server  lost %d (Err %d)  renew fails %d  goroutines %d\n",
				name, k, r.acq.Acquired, r.acq.AcquireSecs, r.acq.HeldStart, r.clientUs(), r.serverUs(), r.rssPerLock(), r.memPerLock(),
				r.lost(), r.out.ErrLost, r.out.RenewFails, r.acq.Goroutines)
		}
	}
	var fr *fenceRun
	if slices.Contains(names, oursName) {
		var err error
		if fr, err = runFence(ctx, srvs, adm); err != nil {
			return nil, nil, fmt.Errorf("%s/fence: %w", heldID, err)
		}
		fmt.Fprintf(os.Stderr, "held fence: %d keys acquired and released in %v, %d keys left on the servers (%.3f per key per server), %d errors\n",
			fr.keys, fr.took.Round(time.Millisecond), fr.left, fr.perKey(), fr.errs)
	}
	return runs, fr, adm.flushAll(ctx)
}

// heldOne runs one implementation's child at one K.
func heldOne(ctx context.Context, name string, k int, srvs []*server, adm *redisAdmin, cfg heldCfg) (*heldRun, error) {
	if err := adm.flushAll(ctx); err != nil {
		return nil, err
	}
	p, err := startHeldChild("-held-child", "-held-impl", name, "-held-addrs", strings.Join(adm.addrs(), ","),
		"-held-n", strconv.Itoa(k), "-held-d", cfg.hold.String(), "-held-acquire-max", cfg.acquireMax.String())
	if err != nil {
		return nil, err
	}
	defer p.stop() // on any early return: kill the child by pid and reap it
	r := &heldRun{impl: name, k: k, hold: cfg.hold}
	if err := p.expectJSON(ctx, cfg.acquireMax+heldSettle+time.Minute, "acquired", &r.acq); err != nil {
		return nil, err
	}
	cpu0, err := serversCPU(srvs)
	if err != nil {
		return nil, err
	}
	mem1, err := adm.usedMemory(ctx)
	if err != nil {
		return nil, err
	}
	if r.keys, err = adm.dbSize(ctx); err != nil {
		return nil, err
	}
	if _, err := p.expect(ctx, cfg.hold+time.Minute, "held"); err != nil {
		return nil, err
	}
	cpu1, err := serversCPU(srvs)
	if err != nil {
		return nil, err
	}
	r.serverCPU = cpu1 - cpu0
	if err := p.expectJSON(ctx, 2*time.Minute, "result", &r.out); err != nil {
		return nil, err
	}
	if err := p.finish(ctx); err != nil {
		return nil, err
	}
	// What the flush gives back is the keys' memory; what it keeps (a
	// server's one-time growth, e.g. for scripts) is not the locks'.
	if err := adm.flushAll(ctx); err != nil {
		return nil, err
	}
	mem2, err := adm.usedMemory(ctx)
	r.memDelta = mem1 - mem2
	return r, err
}

// serversCPU sums the CPU time the servers' processes have used.
func serversCPU(srvs []*server) (time.Duration, error) {
	var sum time.Duration
	for _, s := range srvs {
		d, err := s.cpu()
		if err != nil {
			return 0, err
		}
		sum += d
	}
	return sum, nil
}

// heldProc is a child process that reports on stdout, a line at a time.
type heldProc struct {
	cmd    *exec.Cmd
	lines  chan heldLine
	quit   chan struct{}
	exited bool
}

type heldLine struct {
	s   string
	err error
}

func startHeldChild(args ...string) (*heldProc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, args...)
	cmd.Stderr = os.Stderr
	// A pipe on stdin that nobody writes: when this process dies without
	// killing the child, the child sees EOF and exits.
	if _, err := cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &heldProc{cmd: cmd, lines: make(chan heldLine), quit: make(chan struct{})}
	go p.read(stdout)
	return p, nil
}

// read hands over the child's lines, then the error that ended them (io.EOF
// when the child closed its stdout).
func (p *heldProc) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		select {
		case p.lines <- heldLine{s: sc.Text()}:
		case <-p.quit:
			return
		}
	}
	err := sc.Err()
	if err == nil {
		err = io.EOF
	}
	select {
	case p.lines <- heldLine{err: err}:
	case <-p.quit:
	}
}

// next waits for the child's next line, or the error that ended its output.
func (p *heldProc) next(ctx context.Context, timeout time.Duration) heldLine {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case l := <-p.lines:
		return l
	case <-t.C:
		return heldLine{err: fmt.Errorf("the child did not answer within %v", timeout)}
	case <-ctx.Done():
		return heldLine{err: ctx.Err()}
	}
}

// expect waits for the next line, which must be word alone or word, a space
// and the rest, which it returns.
func (p *heldProc) expect(ctx context.Context, timeout time.Duration, word string) (string, error) {
	l := p.next(ctx, timeout)
	if l.err != nil {
		return "", fmt.Errorf("waiting for the child's %q line: %w", word, l.err)
	}
	if l.s == word {
		return "", nil
	}
	if rest, ok := strings.CutPrefix(l.s, word+" "); ok {
		return rest, nil
	}
	return "", fmt.Errorf("the child said %q, want %q", l.s, word)
}

func (p *heldProc) expectJSON(ctx context.Context, timeout time.Duration, word string, v any) error {
	s, err := p.expect(ctx, timeout, word)
	if err != nil {
		return err
	}
	if err := json.Unmarshal([]byte(s), v); err != nil {
		return fmt.Errorf("the child's %q line: %w", word, err)
	}
	return nil
}

// finish waits for the child's stdout to close and for the child to exit.
func (p *heldProc) finish(ctx context.Context) error {
	if l := p.next(ctx, 30*time.Second); !errors.Is(l.err, io.EOF) {
		return fmt.Errorf("the child did not end after its result (%q): %v", l.s, l.err)
	}
	err := p.cmd.Wait()
	p.exited = true
	if err != nil {
		return fmt.Errorf("held child: %w", err)
	}
	return nil
}

// stop kills the child by pid and reaps it, unless it has exited.
func (p *heldProc) stop() {
	if !p.exited {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
		p.exited = true
	}
	close(p.quit)
}

// redisAdmin talks to every server over a connection of its own, to flush
// them and read their memory and key counts.
type redisAdmin struct{ clients []*redis.Client }

func newRedisAdmin(srvs []*server) *redisAdmin {
	a := &redisAdmin{}
	for _, s := range srvs {
		a.clients = append(a.clients, redis.NewClient(&redis.Options{Addr: s.addr, PoolSize: 1}))
	}
	return a
}

func (a *redisAdmin) addrs() []string {
	var as []string
	for _, c := range a.clients {
		as = append(as, c.Options().Addr)
	}
	return as
}

func (a *redisAdmin) close() {
	for _, c := range a.clients {
		_ = c.Close()
	}
}

func (a *redisAdmin) flushAll(ctx context.Context) error {
	_, err := a.sum(ctx, func(c *redis.Client) (int64, error) { return 0, c.FlushAll(ctx).Err() })
	return err
}

func (a *redisAdmin) dbSize(ctx context.Context) (int64, error) {
	return a.sum(ctx, func(c *redis.Client) (int64, error) { return c.DBSize(ctx).Result() })
}

// usedMemory sums used_memory less the clients' buffers (mem_clients_normal)
// over the servers: the memory of the data.
func (a *redisAdmin) usedMemory(ctx context.Context) (int64, error) {
	return a.sum(ctx, func(c *redis.Client) (int64, error) {
		s, err := c.Info(ctx, "memory").Result()
		if err != nil {
			return 0, err
		}
		n, ok := infoField(s, "used_memory")
		cl, ok2 := infoField(s, "mem_clients_normal")
		if !ok || !ok2 {
			return 0, errors.New("no used_memory or mem_clients_normal in INFO memory")
		}
		return n - cl, nil
	})
}

func (a *redisAdmin) sum(ctx context.Context, f func(c *redis.Client) (int64, error)) (int64, error) {
	var n int64
	for _, c := range a.clients {
		v, err := f(c)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", c.Options().Addr, err)
		}
		n += v
	}
	return n, nil
}

// fenceRun is the fence check's outcome.
type fenceRun struct {
	keys, nodes int
	left        int64 // Σ DBSIZE after the releases
	errs        int64 // TryLock or Release calls that failed
	took        time.Duration
}

func (f *fenceRun) perKey() float64 { return float64(f.left) / float64(f.nodes) / float64(f.keys) }

// runFence acquires and releases fenceKeys distinct keys with fencing, from
// 16 goroutines, then counts the keys left on the servers.
func runFence(ctx context.Context, srvs []*server, adm *redisAdmin) (*fenceRun, error) {
	if err := adm.flushAll(ctx); err != nil {
		return nil, err
	}
	c, pools, err := newHeldClient(adm.addrs())
	if err != nil {
		return nil, err
	}
	defer closePools(pools)
	f := &fenceRun{keys: fenceKeys, nodes: len(srvs)}
	var next, errs atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for range heldWorkers {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < fenceKeys && ctx.Err() == nil; i = next.Add(1) - 1 {
				fenceOne(ctx, c, "fence-"+strconv.FormatInt(i, 10), &errs)
			}
		})
	}
	wg.Wait()
	f.took, f.errs = time.Since(start), errs.Load()
	if err := c.Close(); err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	time.Sleep(500 * time.Millisecond) // the last releases' stragglers
	f.left, err = adm.dbSize(ctx)
	return f, err
}

func fenceOne(ctx context.Context, c *redlock.Client, key string, errs *atomic.Int64) {
	for ctx.Err() == nil {
		l, err := c.TryLock(ctx, key, redlock.WithFencing(true))
		if err != nil {
			errs.Add(1)
			time.Sleep(time.Millisecond)
			continue
		}
		if err := l.Release(ctx); err != nil {
			errs.Add(1)
		}
		return
	}
}

// newHeldClient dials one pool per server and makes a quorumlock Client
// with a TTL of heldTTL.
func newHeldClient(addrs []string, opts ...redlock.Option) (*redlock.Client, []pool.Pool, error) {
	var pools []pool.Pool
	for _, a := range addrs {
		p, err := pool.Dial(&redis.Options{Addr: a})
		if err != nil {
			closePools(pools)
			return nil, nil, err
		}
		pools = append(pools, p)
	}
	c, err := redlock.New(pools, append([]redlock.Option{redlock.WithTTL(heldTTL)}, opts...)...)
	if err != nil {
		closePools(pools)
		return nil, nil, err
	}
	return c, pools, nil
}

func closePools(pools []pool.Pool) {
	for _, p := range pools {
		_ = p.Close()
	}
}

// ---- child ----

// heldSet is one implementation's K locks in the child.
type heldSet interface {
	// acquire makes one attempt at lock i on key and starts its renewal.
	acquire(ctx context.Context, i int, key string) error
	// ident returns lock i's Redis key and value; false if not acquired.
	ident(i int) (rkey, value string, ok bool)
	errLost() int // locks whose Err is not nil; -1 when the implementation cannot tell
	renewFails() int64
}

func newHeldSet(name string, addrs []string, k int) (heldSet, error) {
	switch name {
	case oursName:
		h := &oursHeld{locks: make([]*redlock.Lock, k)}
		c, _, err := newHeldClient(addrs, redlock.WithObserver(renewFailCounter{n: &h.fails}))
		if err != nil {
			return nil, err
		}
		h.c = c
		return h, nil
	case base:
		h := &rsHeld{mus: make([]*redsync.Mutex, k)}
		var pools []rsredis.Pool
		for _, a := range addrs {
			pools = append(pools, rsgoredis.NewPool(redis.NewClient(&redis.Options{Addr: a})))
		}
		h.rs = redsync.New(pools...)
		return h, nil
	}
	return nil, fmt.Errorf("held child: no implementation %q (quorumlock or redsync)", name)
}

type oursHeld struct {
	c     *redlock.Client
	locks []*redlock.Lock
	fails atomic.Int64
}

// renewFailCounter counts the renewal service's failed renewals.
type renewFailCounter struct {
	redlock.NopObserver
	n *atomic.Int64
}

func (o renewFailCounter) ExtendFailed(redlock.Event) { o.n.Add(1) }

func (h *oursHeld) acquire(ctx context.Context, i int, key string) error {
	l, err := h.c.TryLock(ctx, key, redlock.WithAutoExtend(true))
	if err != nil {
		return err
	}
	h.locks[i] = l
	return nil
}

func (h *oursHeld) ident(i int) (string, string, bool) {
	if l := h.locks[i]; l != nil {
		return redlock.DefaultKeyPrefix + "{" + l.Key() + "}", l.Token(), true
	}
	return "", "", false
}

func (h *oursHeld) errLost() int {
	n := 0
	for _, l := range h.locks {
		if l != nil && l.Err() != nil {
			n++
		}
	}
	return n
}

func (h *oursHeld) renewFails() int64 { return h.fails.Load() }

type rsHeld struct {
	rs    *redsync.Redsync
	mus   []*redsync.Mutex
	fails atomic.Int64
}

func (h *rsHeld) acquire(ctx context.Context, i int, key string) error {
	m := h.rs.NewMutex(key, redsync.WithExpiry(heldTTL), redsync.WithTries(1))
	if err := m.LockContext(ctx); err != nil {
		return err
	}
	h.mus[i] = m
	go h.renew(m)
	return nil
}

// renew is how redsync's users keep a mutex: Extend on a ticker, here every
// second (TTL/3), until the process ends.
func (h *rsHeld) renew(m *redsync.Mutex) {
	t := time.NewTicker(time.Second)
	for range t.C {
		if ok, err := m.Extend(); !ok || err != nil {
			h.fails.Add(1)
		}
	}
}

func (h *rsHeld) ident(i int) (string, string, bool) {
	if m := h.mus[i]; m != nil {
		return m.Name(), m.Value(), true
	}
	return "", "", false
}

func (h *rsHeld) errLost() int      { return -1 }
func (h *rsHeld) renewFails() int64 { return h.fails.Load() }

// heldChild is the held scenario's client process: it acquires k locks,
// holds them for hold and reports on stdout (see the top of this file).
func heldChild(name, addrList string, k int, hold, acquireMax time.Duration) error {
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); os.Exit(1) }() // the parent went away
	addrs := strings.Split(addrList, ",")
	hs, err := newHeldSet(name, addrs, k)
	if err != nil {
		return err
	}
	runtime.GC()
	var acq heldAcq
	if acq.RSSBefore, err = vmRSS(); err != nil {
		return err
	}
	start := time.Now()
	acq.Acquired = acquireAll(hs, k, acquireMax)
	acq.AcquireSecs = time.Since(start).Seconds()
	time.Sleep(heldSettle)
	runtime.GC()
	if acq.RSSAfter, err = vmRSS(); err != nil {
		return err
	}
	acq.Goroutines = runtime.NumGoroutine()
	if acq.HeldStart, err = countHeld(addrs, hs, k); err != nil {
		return err
	}
	cpu0 := selfCPU()
	if err := emit("acquired", &acq); err != nil {
		return err
	}
	time.Sleep(hold)
	out := heldOut{HoldCPU: int64(selfCPU() - cpu0)}
	if _, err := fmt.Println("held"); err != nil {
		return err
	}
	if out.RSSEnd, err = vmRSS(); err != nil {
		return err
	}
	if out.Held, err = countHeld(addrs, hs, k); err != nil {
		return err
	}
	// After the check: a lock whose keys were gone from a quorum then must
	// show as lost by now (its local deadline comes before its keys expire).
	out.ErrLost, out.RenewFails = hs.errLost(), hs.renewFails()
	return emit("result", &out)
}

func emit(word string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Printf("%s %s\n", word, b)
	return err
}

// acquireAll acquires keys 0..k-1 from heldWorkers goroutines, retrying a
// key until it is acquired or max has passed; it returns how many it got.
func acquireAll(hs heldSet, k int, max time.Duration) int {
	ctx, cancel := context.WithTimeout(context.Background(), max)
	defer cancel()
	var next, got, fails atomic.Int64
	var wg sync.WaitGroup
	for range heldWorkers {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < k && ctx.Err() == nil; i = int(next.Add(1) - 1) {
				for key := "held-" + strconv.Itoa(i); ctx.Err() == nil; {
					err := hs.acquire(ctx, i, key)
					if err == nil {
						got.Add(1)
						break
					}
					if n := fails.Add(1); *verbose && n <= 3 {
						fmt.Fprintln(os.Stderr, "held: acquire:", err)
					}
					time.Sleep(time.Millisecond)
				}
			}
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		fmt.Fprintf(os.Stderr, "held child: acquired %d of %d locks in %v; holding those\n", got.Load(), k, max)
	}
	return int(got.Load())
}

// countHeld counts the locks whose value is on a quorum of the servers.
func countHeld(addrs []string, hs heldSet, k int) (int, error) {
	on := make([][]bool, len(addrs))
	errs := make([]error, len(addrs))
	var wg sync.WaitGroup
	for s, a := range addrs {
		wg.Go(func() { on[s], errs[s] = heldOn(a, hs, k) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	n := 0
	for i := range k {
		votes := 0
		for s := range on {
			if on[s][i] {
				votes++
			}
		}
		if votes >= len(addrs)/2+1 {
			n++
		}
	}
	return n, nil
}

// heldOn reads every lock's key on one server, heldChunk GETs per pipeline,
// and reports which hold the lock's value: the token itself, or a renewal
// session's lock of the token whose session key holds its incarnation.
func heldOn(addr string, hs heldSet, k int) ([]bool, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1})
	defer c.Close()
	ctx := context.Background()
	sessions := map[string]string{} // session key: its incarnation
	got := make([]bool, k)
	cmds := make([]*redis.StringCmd, heldChunk)
	for from := 0; from < k; from += heldChunk {
		to := min(from+heldChunk, k)
		pipe := c.Pipeline()
		for i := from; i < to; i++ {
			cmds[i-from] = nil
			if rkey, _, ok := hs.ident(i); ok {
				cmds[i-from] = pipe.Get(ctx, rkey)
			}
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("GET on %s: %w", addr, err)
		}
		for i := from; i < to; i++ {
			if cmd := cmds[i-from]; cmd != nil {
				rkey, want, _ := hs.ident(i)
				v, err := cmd.Result()
				got[i] = err == nil && (v == want || sessionHolds(ctx, c, sessions, rkey, v, want))
			}
		}
	}
	return got, nil
}

// sessionHolds reports whether v, lock key rkey's value, is a session lock
// of token want whose session lives (docs/safety.md, "Renewal sessions":
// token \x1f incarnation \x1f prefix length; the session key is the prefix,
// "s:" and the token's first 16 bytes). sessions caches the session keys.
func sessionHolds(ctx context.Context, c *redis.Client, sessions map[string]string, rkey, v, want string) bool {
	f := strings.Split(v, "\x1f")
	if len(f) != 3 || f[0] != want || len(want) < 16 {
		return false
	}
	n, err := strconv.Atoi(f[2])
	if err != nil || n > len(rkey) {
		return false
	}
	sk := rkey[:n] + "s:" + want[:16]
	inc, ok := sessions[sk]
	if !ok {
		inc, _ = c.Get(ctx, sk).Result()
		sessions[sk] = inc
	}
	return inc == f[1]
}

// vmRSS returns this process's resident set size.
func vmRSS() (int64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v) // "12345 kB"
			if len(f) == 2 && f[1] == "kB" {
				n, err := strconv.ParseInt(f[0], 10, 64)
				return n << 10, err
			}
		}
	}
	return 0, errors.New("no VmRSS in kB in /proc/self/status")
}

// selfCPU is this process's user + system CPU time so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ---- report ----

// thousands writes n with commas between groups of three digits.
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func findHeld(runs []*heldRun, impl string, k int) *heldRun {
	if i := slices.IndexFunc(runs, func(r *heldRun) bool { return r.impl == impl && r.k == k }); i >= 0 {
		return runs[i]
	}
	return nil
}

// largestK is the largest K with a run of each of impls for which ok holds.
func largestK(runs []*heldRun, ks []int, ok func(*heldRun) bool, impls ...string) (int, bool) {
	best, found := 0, false
	for _, k := range ks {
		if k > best && !slices.ContainsFunc(impls, func(im string) bool { r := findHeld(runs, im, k); return r == nil || !ok(r) }) {
			best, found = k, true
		}
	}
	return best, found
}

// heldMarkdown renders the description, the targets and one table per K.
func heldMarkdown(runs []*heldRun, fr *fenceRun, cfg heldCfg, nodes int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "#### Holding K auto-renewed locks (`%s`)\n\n", heldID)
	fmt.Fprintf(&b, "One child process per implementation and K, one after the other, the servers flushed before each: K distinct keys acquired by %d goroutines, "+
		"TTL %s, renewed every second (quorumlock: `WithAutoExtend`, a renewal session renewed every TTL/3 with one command per node, each lock's key refreshed every 5 TTL; redsync: a goroutine per mutex calling `Extend` on a 1 s ticker), "+
		"%s settle and a GC, then held for %s. CPU per held lock-second is the CPU used during the hold ÷ its held lock-seconds, (locks on a quorum at its start + at its end) ÷ 2 × %s: the client's from `getrusage`, "+
		"the %d `redis-server` processes' from `/proc/<pid>/stat`. Client RSS per lock is `VmRSS` after acquiring (and the settle) less before, ÷ locks acquired. "+
		"Redis memory per lock is `used_memory` less the client connections' buffers (`mem_clients_normal`), summed over the servers, after acquiring less after the flush that follows the run "+
		"(what the keys took and the flush gave back), "+
		"÷ the keys on the servers (K × %d when every lock is on every node). A lock is on a quorum when its key holds its value on ≥ %d of %d servers (pipelined GETs from the child, "+
		"after the settle and after the hold); the locks not held at the end include any not acquired within %s. %d CPUs, shared by the client and the servers.\n\n",
		heldWorkers, human(heldTTL), human(heldSettle), human(cfg.hold), human(cfg.hold), nodes, nodes, nodes/2+1, nodes, human(cfg.acquireMax), runtime.NumCPU())
	heldTargets(&b, runs, fr, cfg)
	for _, k := range cfg.ks {
		var rs []*heldRun
		for _, r := range runs {
			if r.k == k {
				rs = append(rs, r)
			}
		}
		if len(rs) > 0 {
			fmt.Fprintf(&b, "\n#### %s locks held for %s\n\n", thousands(k), human(cfg.hold))
			heldTable(&b, rs)
		}
	}
	return b.String()
}

// heldTargets writes the targets table.
func heldTargets(b *strings.Builder, runs []*heldRun, fr *fenceRun, cfg heldCfg) {
	b.WriteString("| target | measured | met |\n|---|---:|:---:|\n")
	line := func(name string, known bool, got func() string, ok func() bool) {
		mark, g := "–", "not run"
		if known {
			g, mark = got(), "no"
			if ok() {
				mark = "yes"
			}
		}
		fmt.Fprintf(b, "| %s | %s | %s |\n", name, g, mark)
	}
	vs := func(k int, f func(r *heldRun) string) string {
		s := f(findHeld(runs, oursName, k))
		if r := findHeld(runs, base, k); r != nil {
			s += " (redsync " + f(r) + ")"
		}
		return s
	}
	o := findHeld(runs, oursName, targetHeldK)
	line(fmt.Sprintf("%s locks held for the run: 0 lost (quorumlock)", thousands(targetHeldK)), o != nil,
		func() string {
			return vs(targetHeldK, func(r *heldRun) string { return fmt.Sprintf("%d lost", r.lost()) }) + fmt.Sprintf("; Err() ≠ nil: %d", o.out.ErrLost)
		},
		func() bool { return o.lost() == 0 && o.out.ErrLost == 0 })
	o = findHeld(runs, oursName, targetCPUK)
	line(fmt.Sprintf("client + server CPU per held lock-second ≤ %.0f µs at %s locks (quorumlock)", targetCPU, thousands(targetCPUK)), o != nil,
		func() string {
			return vs(targetCPUK, func(r *heldRun) string { return fmt.Sprintf("%.2f µs", r.totalUs()) }) +
				fmt.Sprintf("; quorumlock client %.2f + server %.2f", o.clientUs(), o.serverUs())
		},
		func() bool { return o.totalUs() <= targetCPU })
	kr, okR := largestK(runs, cfg.ks, func(*heldRun) bool { return true }, oursName)
	line(fmt.Sprintf("client RSS per held lock ≤ %d KB (quorumlock, at %s locks)", targetRSS/1024, thousands(kr)), okR,
		func() string { return vs(kr, func(r *heldRun) string { return fmt.Sprintf("%.0f B", r.rssPerLock()) }) },
		func() bool { return findHeld(runs, oursName, kr).rssPerLock() <= targetRSS })
	line(fmt.Sprintf("fence keys left per key ≤ %g", targetFenceLeft), fr != nil,
		func() string {
			return fmt.Sprintf("%.4f (%d keys on %d nodes after %s fenced acquire + release; %d failed calls, retried)", fr.perKey(), fr.left, fr.nodes, thousands(fr.keys), fr.errs)
		},
		func() bool { return fr.perKey() <= targetFenceLeft })
	// Memory is compared where both had every lock on a quorum: with fewer
	// keys, the fixed cost of an empty server's tables weighs on each.
	km, okM := largestK(runs, cfg.ks, func(r *heldRun) bool { return r.acq.HeldStart == r.k }, oursName, base)
	line(fmt.Sprintf("Redis memory per held lock ≤ redsync's (at %s locks, the largest K both held in full)", thousands(km)), okM,
		func() string {
			o, r := findHeld(runs, oursName, km), findHeld(runs, base, km)
			return fmt.Sprintf("%.0f B vs %.0f B per lock per server", o.memPerLock(), r.memPerLock())
		},
		func() bool { return findHeld(runs, oursName, km).memPerLock() <= findHeld(runs, base, km).memPerLock() })
}

// heldTable writes one K's figures, an implementation per column.
func heldTable(b *strings.Builder, rs []*heldRun) {
	var rsb *heldRun
	if i := slices.IndexFunc(rs, func(r *heldRun) bool { return r.impl == base }); i >= 0 {
		rsb = rs[i]
	}
	b.WriteString("| metric |")
	seps := "|---|"
	for _, r := range rs {
		fmt.Fprintf(b, " %s |", r.impl)
		seps += "---:|"
	}
	for _, r := range rs {
		if r.impl != base && rsb != nil {
			fmt.Fprintf(b, " %s ÷ redsync |", r.impl)
			seps += "---:|"
		}
	}
	b.WriteString("\n" + seps + "\n")
	row := func(name, format string, val func(*heldRun) float64) {
		fmt.Fprintf(b, "| %s |", name)
		for _, r := range rs {
			if v := val(r); v < 0 {
				b.WriteString(" – |")
			} else {
				fmt.Fprintf(b, " "+format+" |", v)
			}
		}
		for _, r := range rs {
			if r.impl != base && rsb != nil {
				fmt.Fprintf(b, " %s |", ratio(max(val(r), 0), max(val(rsb), 0)))
			}
		}
		b.WriteString("\n")
	}
	heldRows(row)
}

func heldRows(row func(name, format string, val func(*heldRun) float64)) {
	row("locks acquired", "%.0f", func(r *heldRun) float64 { return float64(r.acq.Acquired) })
	row("locks on a quorum at the start of the hold", "%.0f", func(r *heldRun) float64 { return float64(r.acq.HeldStart) })
	row("time to acquire them (s)", "%.1f", func(r *heldRun) float64 { return r.acq.AcquireSecs })
	row("client CPU per held lock-second (µs)", "%.2f", (*heldRun).clientUs)
	row("server CPU per held lock-second (µs, 5 servers)", "%.2f", (*heldRun).serverUs)
	row("client + server CPU per held lock-second (µs)", "%.2f", (*heldRun).totalUs)
	row("client RSS per held lock (B)", "%.0f", (*heldRun).rssPerLock)
	row("client RSS after acquiring (MiB)", "%.1f", func(r *heldRun) float64 { return float64(r.acq.RSSAfter) / (1 << 20) })
	row("client RSS at the end of the hold (MiB)", "%.1f", func(r *heldRun) float64 { return float64(r.out.RSSEnd) / (1 << 20) })
	row("Redis memory per lock per server (B)", "%.0f", (*heldRun).memPerLock)
	row("locks not held at the end (of K: not on a quorum, or never acquired)", "%.0f", func(r *heldRun) float64 { return float64(r.lost()) })
	row("… acquired, then lost", "%.0f", func(r *heldRun) float64 { return float64(r.acq.Acquired - r.out.Held) })
	row("locks whose Err() is not nil (after the check)", "%.0f", func(r *heldRun) float64 { return float64(r.out.ErrLost) })
	row("failed renewals, whole run", "%.0f", func(r *heldRun) float64 { return float64(r.out.RenewFails) })
	row("goroutines in the child after acquiring", "%.0f", func(r *heldRun) float64 { return float64(r.acq.Goroutines) })
}

// heldChart draws the client + server CPU per held lock-second for each K,
// a stacked bar per implementation: client (dark), server (light).
func heldChart(runs []*heldRun, ks []int, impls []string, path string) error {
	const w, h, top, left = 900, 440, 70, 20
	bottom := h - 60
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	text(img, 10, 16, "holding K auto-renewed locks: CPU per held lock-second (us), 5 local Redis servers", color.Black)
	text(img, 10, 34, "stacked: client (dark) + server (light); lower is better", color.Black)
	maxV := 0.0
	for _, r := range runs {
		maxV = max(maxV, r.totalUs())
	}
	if maxV == 0 || len(ks) == 0 {
		return writePNG(img, path)
	}
	fill(img, image.Rect(left, bottom, w-left, bottom+1), color.Black)
	groupW := (w - 2*left) / len(ks)
	barW := min((groupW-20)/len(impls), 120)
	px := func(v float64) int { return int(float64(bottom-top) * v / maxV) }
	for g, k := range ks {
		gx := left + g*groupW + 10
		for i, im := range impls {
			r := findHeld(runs, im, k)
			if r == nil {
				continue
			}
			x := gx + i*barW
			c, s := px(r.clientUs()), px(r.totalUs())
			fill(img, image.Rect(x+2, bottom-c, x+barW-2, bottom), palette[im])
			fill(img, image.Rect(x+2, bottom-s, x+barW-2, bottom-c), lighter(palette[im]))
			text(img, x+2, bottom-s-4, fmt.Sprintf("%.2f", r.totalUs()), color.Black)
		}
		label := "K = " + thousands(k)
		text(img, gx+len(impls)*barW/2-7*len(label)/2, bottom+16, label, color.Black)
	}
	for i, im := range impls { // legend
		x := left + i*160
		fill(img, image.Rect(x, h-22, x+12, h-10), palette[im])
		fill(img, image.Rect(x+12, h-22, x+24, h-10), lighter(palette[im]))
		text(img, x+28, h-11, im, color.Black)
	}
	return writePNG(img, path)
}

func lighter(c color.RGBA) color.RGBA {
	return color.RGBA{uint8((int(c.R) + 2*255) / 3), uint8((int(c.G) + 2*255) / 3), uint8((int(c.B) + 2*255) / 3), 0xff}
}
