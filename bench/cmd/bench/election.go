package main

// The election scenario: failover time of leader election.
//
// Each round, a child process of this command (-election-child) wins
// Client.Campaign on an election of its own and stays leader, its lock
// auto-extended; a standby in this process then campaigns too and waits.
// After a random part of the TTL (ttl/2 to 5ttl/6, so that the stop falls
// anywhere between two renewals), the leader is stopped without resigning:
//
//   - kill: SIGKILL, its process and connections gone;
//   - pause: SIGSTOP until the standby leads, then SIGCONT.
//
// The leader's child keeps its lock's Deadline, on CLOCK_MONOTONIC, in a
// file both processes map (it polls it every millisecond), so the parent
// reads the deadline the stopped leader last had: the end of its lease. The
// figure is the time from that deadline to the return of the standby's
// Campaign (it is never negative: the standby can win only once the key
// expired on a quorum, after the leader's validity ran out). Beside it: the
// time from the signal to the new leader, and the split of the failover
// into the leader's deadline to the key's expiry on a quorum of nodes
// (PTTL read right after the stop: the drift allowance, plus a renewal that
// landed on the nodes while its reply never reached the stopped leader) and
// that expiry to the new leader (the standby's retry interval). A paused
// leader, once resumed, must learn that it lost its lease (its Done closes)
// and must not renew it; the new leader's term must exceed the old one's.
//
// Rounds alternate kill and pause, -election-rounds of each per pass.

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sys/unix"

	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redlock"
)

const (
	electionID      = "election"
	electionBegin   = "<!-- bench:election:begin -->"
	electionEnd     = "<!-- bench:election:end -->"
	electionHeading = "### Leader election: failover"
)

var (
	electionTTL    = flag.Duration("election-ttl", time.Second, "election: the leaders' TTL")
	electionRounds = flag.Int("election-rounds", 4, "election: rounds of each of kill and pause per pass")
	// Internal: the election scenario re-execs this command as its leader.
	electionChildFlag = flag.Bool("election-child", false, "internal: run as the election scenario's leader")
	electionAddrs     = flag.String("election-addrs", "", "internal")
	electionName      = flag.String("election-name", "", "internal")
	electionFile      = flag.String("election-file", "", "internal")
)

// electionModes are the ways a round stops its leader.
var electionModes = []string{"kill", "pause"}

// electionShm is what the leader's child shares with the parent: a file of
// three words mapped by both.
type electionShm struct {
	mem      []byte
	deadline *atomic.Int64  // the leader's Deadline, CLOCK_MONOTONIC ns
	term     *atomic.Uint64 // its Fence
	lostAt   *atomic.Int64  // when its Done closed, CLOCK_MONOTONIC ns (0: not yet)
}

func openElectionShm(path string, create bool) (*electionShm, error) {
	if create {
		if err := os.WriteFile(path, make([]byte, 24), 0o600); err != nil {
			return nil, err
		}
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	mem, err := unix.Mmap(int(f.Fd()), 0, 24, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, err
	}
	return &electionShm{mem: mem, deadline: (*atomic.Int64)(unsafe.Pointer(&mem[0])),
		term: (*atomic.Uint64)(unsafe.Pointer(&mem[8])), lostAt: (*atomic.Int64)(unsafe.Pointer(&mem[16]))}, nil
}

func (s *electionShm) close() { _ = unix.Munmap(s.mem) }

// electionChild is the leader: it campaigns, says "leader <term>", keeps
// its Deadline in the shared file, and says "lost" and exits once its Done
// closes (or when its stdin closes: the parent is gone).
func electionChild(addrList, name, path string, ttl time.Duration) error {
	shm, err := openElectionShm(path, false)
	if err != nil {
		return err
	}
	defer shm.close()
	var pools []pool.Pool
	defer func() {
		for _, p := range pools {
			_ = p.Close()
		}
	}()
	for a := range strings.SplitSeq(addrList, ",") {
		p, err := pool.Dial(&redis.Options{Addr: a})
		if err != nil {
			return err
		}
		pools = append(pools, p)
	}
	c, err := redlock.New(pools, redlock.WithTTL(ttl))
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := c.Campaign(ctx, name, "leader")
	if err != nil {
		return err
	}
	at, atMono := time.Now(), mono()
	toMono := func(t time.Time) int64 { return atMono + int64(t.Sub(at)) }
	shm.deadline.Store(toMono(l.Deadline()))
	shm.term.Store(l.Fence())
	fmt.Printf("leader %d\n", l.Fence())
	parentGone := make(chan struct{})
	go func() { _, _ = os.Stdin.Read(make([]byte, 1)); close(parentGone) }()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-l.Done():
			shm.lostAt.Store(mono())
			shm.deadline.Store(toMono(l.Deadline()))
			fmt.Printf("lost %v\n", l.Err())
			return nil
		case <-parentGone:
			return l.Release(context.Background())
		case <-tick.C:
			shm.deadline.Store(toMono(l.Deadline()))
		}
	}
}

// electionRound is what one round measured.
type electionRound struct {
	mode         string
	gap          time.Duration // leader's deadline → the standby's Campaign returned
	fromSignal   time.Duration // the signal → the standby's Campaign returned
	toExpiry     time.Duration // leader's deadline → its key expired on a quorum
	afterExpiry  time.Duration // that expiry → the standby's Campaign returned
	learned      time.Duration // pause: SIGCONT → the resumed leader's Done closed
	termUp       bool          // the new leader's term exceeds the old one's
	renewedAfter bool          // pause: the resumed leader's deadline moved (it renewed a lost lease)
}

// electionBench runs the election scenario, pass by pass, and reports it.
type electionBench struct {
	ttl    time.Duration
	rounds int
	runs   []electionRound
}

// newElectionBench checks the election flags; only is the -scenarios list,
// libs the implementations -impls selects. It returns nil when the scenario
// is off.
func newElectionBench(only string, libs []string) (*electionBench, error) {
	if (only != "" && !slices.Contains(strings.Split(only, ","), electionID)) || !slices.Contains(libs, oursName) {
		return nil, nil
	}
	if *electionRounds < 1 || *electionTTL < 100*time.Millisecond || *electionTTL > 30*time.Second {
		return nil, fmt.Errorf("election: -election-rounds must be positive and -election-ttl from 100ms to 30s")
	}
	return &electionBench{ttl: *electionTTL, rounds: *electionRounds}, nil
}

// pass runs the pass's rounds, alternating the modes.
func (eb *electionBench) pass(ctx context.Context, p int, srvs []*server) error {
	if eb == nil {
		return nil
	}
	for i := range eb.rounds * len(electionModes) {
		mode := electionModes[(i+p)%len(electionModes)]
		r, err := electionOne(ctx, mode, srvs, eb.ttl)
		if err != nil {
			return fmt.Errorf("%s/%s: %w", electionID, mode, err)
		}
		eb.runs = append(eb.runs, r)
		fmt.Fprintf(os.Stderr, "pass %d %-8s %-5s deadline → new leader %-9v signal → new leader %-9v deadline → quorum expiry %-9v expiry → new leader %-9v resumed leader learned %-9v term up %v renewed after %v\n",
			p+1, electionID, mode, r.gap.Round(time.Microsecond), r.fromSignal.Round(time.Microsecond), r.toExpiry.Round(time.Microsecond),
			r.afterExpiry.Round(time.Microsecond), r.learned.Round(time.Microsecond), r.termUp, r.renewedAfter)
	}
	return nil
}

// electionOne runs one round: a leader in a child process, a standby here,
// the leader stopped by mode.
func electionOne(ctx context.Context, mode string, srvs []*server, ttl time.Duration) (electionRound, error) {
	r := electionRound{mode: mode}
	dir, err := os.MkdirTemp("", "bench-election-")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)
	shm, err := openElectionShm(filepath.Join(dir, "shm"), true)
	if err != nil {
		return r, err
	}
	defer shm.close()
	addrs := make([]string, len(srvs))
	for i, s := range srvs {
		addrs[i] = s.addr
	}
	name := fmt.Sprintf("election-%d-%d", os.Getpid(), runSeq.Add(1))
	child, err := startHeldChild("-election-child", "-election-addrs", strings.Join(addrs, ","), "-election-name", name,
		"-election-file", filepath.Join(dir, "shm"), "-election-ttl", ttl.String())
	if err != nil {
		return r, err
	}
	defer child.stop()
	defer func() { _ = child.cmd.Process.Signal(syscall.SIGCONT) }() // a stopped child must be able to die
	s, err := child.expect(ctx, 30*time.Second, "leader")
	if err != nil {
		return r, err
	}
	term, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return r, fmt.Errorf("the leader's term %q: %w", s, err)
	}

	standby, err := newOurs(addrs)
	if err != nil {
		return r, err
	}
	defer standby.close()
	c := standby.(*ours).c
	type won struct {
		l   *redlock.Lock
		at  int64
		err error
	}
	wonCh := make(chan won, 1)
	cctx, cancel := context.WithTimeout(ctx, 10*ttl+10*time.Second)
	defer cancel()
	go func() {
		l, err := c.Campaign(cctx, name, "standby", redlock.WithTTL(ttl))
		wonCh <- won{l, mono(), err}
	}()

	sleepCtx(ctx, ttl/2+rand.N(ttl/3))
	signalAt := mono()
	if mode == "kill" {
		err = child.cmd.Process.Kill()
		if err == nil {
			_ = child.cmd.Wait()
			child.exited = true
		}
	} else {
		err = child.cmd.Process.Signal(syscall.SIGSTOP)
		if err == nil {
			err = waitStopped(child.cmd.Process.Pid)
		}
	}
	if err != nil {
		return r, err
	}
	deadline := shm.deadline.Load()
	expiry, err := quorumExpiry(ctx, srvs, "quorumlock:{"+name+"}")
	if err != nil {
		return r, err
	}
	var w won
	select {
	case w = <-wonCh:
	case <-ctx.Done():
		return r, ctx.Err()
	}
	if w.err != nil {
		return r, fmt.Errorf("the standby's Campaign: %w", w.err)
	}
	r.gap, r.fromSignal = time.Duration(w.at-deadline), time.Duration(w.at-signalAt)
	r.toExpiry, r.afterExpiry = time.Duration(expiry-deadline), time.Duration(w.at-expiry)
	r.termUp = w.l.Fence() > term
	if mode == "pause" {
		contAt := mono()
		if err := child.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			return r, err
		}
		if _, err := child.expect(ctx, 10*time.Second, "lost"); err != nil {
			return r, err
		}
		r.learned = time.Duration(shm.lostAt.Load() - contAt)
		r.renewedAfter = shm.deadline.Load() > deadline
		if err := child.finish(ctx); err != nil {
			return r, err
		}
	}
	if err := w.l.Release(context.WithoutCancel(ctx)); err != nil {
		return r, fmt.Errorf("the new leader's Release: %w", err)
	}
	return r, nil
}

// waitStopped waits until the process pid is stopped (state T in
// /proc/<pid>/stat).
func waitStopped(pid int) error {
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Microsecond) {
		f, err := procStat(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return err
		}
		if f[0] == "T" {
			return nil
		}
	}
	return fmt.Errorf("process %d did not stop", pid)
}

// quorumExpiry reads the PTTL of key on every server and returns when it
// expires on a quorum of them (CLOCK_MONOTONIC ns): the majority-th
// earliest expiry, a missing key counting as expired now.
func quorumExpiry(ctx context.Context, srvs []*server, key string) (int64, error) {
	at := make([]int64, len(srvs))
	for i, s := range srvs {
		c := redis.NewClient(&redis.Options{Addr: s.addr, PoolSize: 1})
		now := mono()
		pttl, err := c.PTTL(ctx, key).Result()
		_ = c.Close()
		if err != nil {
			return 0, fmt.Errorf("PTTL on %s: %w", s.addr, err)
		}
		at[i] = now + max(int64(pttl), 0)
	}
	slices.Sort(at)
	return at[len(at)/2], nil
}

// ---- the report ----

// nearest returns the q-quantile of sorted v (nearest rank).
func nearest(v []time.Duration, q float64) time.Duration {
	if len(v) == 0 {
		return 0
	}
	i := int(q*float64(len(v))+0.999999) - 1
	return v[max(0, min(i, len(v)-1))]
}

// report prints the election report after env and writes it where -md says.
func (eb *electionBench) report(env string, passes int, md string) error {
	if eb == nil {
		return nil
	}
	return publish(env+"\n"+eb.markdown(passes), md, electionHeading, electionBegin, electionEnd)
}

func (eb *electionBench) markdown(passes int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "#### Failover of a leader that stops without resigning (`%s`)\n\n", electionID)
	fmt.Fprintf(&b, "%d pass(es) of %d rounds per mode; TTL %s (renewal every TTL/3, the default retry backoff of the standby's `Campaign`); "+
		"the leader is stopped %s to %s after it won. Median and p90 (nearest rank) over the rounds, in ms. "+
		"deadline → new leader: from the stopped leader's last `Deadline()` to the return of the standby's `Campaign`; "+
		"signal → new leader: from SIGKILL or SIGSTOP; the last two columns split the first at the key's expiry on a quorum (PTTL read at the stop).\n\n",
		passes, eb.rounds, human(eb.ttl), human(eb.ttl/2), human((eb.ttl/2 + eb.ttl/3).Round(time.Millisecond)))
	b.WriteString("| leader | rounds | deadline → new leader p50 | p90 | signal → new leader p50 | p90 | deadline → key expired on a quorum p50 | p90 | expiry → new leader p50 | p90 | new term > old term | resumed leader learned of its loss (after SIGCONT) p50 | p90 | resumed leader renewed |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, mode := range electionModes {
		var gap, sig, exp, after, learned []time.Duration
		up, renewed, n := 0, 0, 0
		for _, r := range eb.runs {
			if r.mode != mode {
				continue
			}
			n++
			gap, sig, exp, after = append(gap, r.gap), append(sig, r.fromSignal), append(exp, r.toExpiry), append(after, r.afterExpiry)
			learned = append(learned, r.learned)
			if r.termUp {
				up++
			}
			if r.renewedAfter {
				renewed++
			}
		}
		for _, v := range [][]time.Duration{gap, sig, exp, after, learned} {
			slices.Sort(v)
		}
		title := "killed (SIGKILL)"
		learnedCols := "– | – | –"
		if mode == "pause" {
			title = "paused (SIGSTOP, SIGCONT once a new leader won)"
			learnedCols = fmt.Sprintf("%s | %s | %d of %d", ms(nearest(learned, 0.5)), ms(nearest(learned, 0.9)), renewed, n)
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %d of %d | %s |\n", title, n,
			ms(nearest(gap, 0.5)), ms(nearest(gap, 0.9)), ms(nearest(sig, 0.5)), ms(nearest(sig, 0.9)),
			ms(nearest(exp, 0.5)), ms(nearest(exp, 0.9)), ms(nearest(after, 0.5)), ms(nearest(after, 0.9)), up, n, learnedCols)
	}
	return b.String()
}
