// Command linecost measures what a key's line of waiters costs one Redis
// server in the worst case the bounds allow (docs/design.md, "Bounds"):
// one release and one acquire of a key whose line has seen 100,000 waiters
// come and go (half left, half stopped asking) and is kept full of lapsed
// entries, against the same on a fresh key, in one run, interleaved; and
// the memory the line's keys hold. It starts its own redis-server on a free
// loopback port and stops it. Usage: go run ./cmd/linecost [-n 500]
// [-waiters 100000] [-redis-server redis-server].
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/internal/scripts"
)

const (
	grace   = 100   // ms: a hand-off's grace
	entry   = 20    // ms: a waiter's entry lives this long after its attempt
	holdTTL = 60000 // ms
)

func main() {
	n := flag.Int("n", 500, "timed release/acquire pairs per key")
	waiters := flag.Int("waiters", 100000, "waiters that come and go on the busy key first")
	bin := flag.String("redis-server", "redis-server", "the redis-server binary")
	flag.Parse()
	rdb, stop, err := start(*bin)
	if err != nil {
		log.Fatal(err)
	}
	defer stop()
	ctx := context.Background()
	for _, s := range []*redis.Script{scripts.Acquire, scripts.Release, scripts.Leave} {
		must(s.Load(ctx, rdb).Err())
	}
	fresh, busy := "quorumlock:{fresh}", "quorumlock:{busy}"
	must(scripts.Acquire.Run(ctx, rdb, []string{fresh}, "holder", holdTTL).Err())
	history(ctx, rdb, busy, *waiters)
	fmt.Printf("after %d waiters came and went: %s\n", *waiters, footprint(ctx, rdb, busy))
	var tf, tb [2][]time.Duration // [release, acquire]
	for i := range *n {
		topUp(ctx, rdb, busy, i) // untimed: the line stays full, its head lapsed
		keys := []struct {
			key string
			t   *[2][]time.Duration
		}{{fresh, &tf}, {busy, &tb}}
		if i%2 == 1 { // interleaved, each first in half the pairs
			keys[0], keys[1] = keys[1], keys[0]
		}
		for _, k := range keys {
			r, a := cycle(ctx, rdb, k.key)
			k.t[0], k.t[1] = append(k.t[0], r), append(k.t[1], a)
		}
	}
	fmt.Printf("line kept full: %s\n", footprint(ctx, rdb, busy))
	for j, op := range []string{"release", "acquire"} {
		f, b := stats(tf[j]), stats(tb[j])
		fmt.Printf("%-8s (server µs per call) fresh key p50 %6.1f µs p99 %6.1f µs max %6.1f µs | full line p50 %6.1f µs p99 %6.1f µs max %6.1f µs | ratio p50 %.2fx p99 %.2fx\n",
			op, f[0], f[1], f[2], b[0], b[1], b[2], b[0]/f[0], b[1]/f[1])
	}
}

// history makes w waiters join key's line while it is held and leave it:
// even ones for good, odd ones by lapsing.
func history(ctx context.Context, rdb *redis.Client, key string, w int) {
	must(scripts.Acquire.Run(ctx, rdb, []string{key}, "holder", holdTTL).Err())
	// A waiter that waits all along, ranked last, keeps the line's keys alive.
	must(scripts.Acquire.Run(ctx, rdb, []string{key}, "tkeeper", holdTTL, "keeper", 1<<50, 10*holdTTL, 0).Err())
	for from := 0; from < w; from += 1000 {
		p := rdb.Pipeline()
		for i := from; i < min(from+1000, w); i++ {
			id := "h." + strconv.Itoa(i)
			scripts.Acquire.Run(ctx, p, []string{key}, "t"+id, holdTTL, id, i, entry, 0)
			if i%2 == 0 {
				scripts.Leave.Run(ctx, p, []string{key}, id, grace, entry, 1)
			}
		}
		_, err := p.Exec(ctx)
		must(err)
		time.Sleep(time.Millisecond)
	}
	time.Sleep(2 * entry * time.Millisecond)
}

// topUp fills key's line up to its bound with waiters ranked first that
// stop asking at once, and lets them lapse: every timed release meets a
// full line whose head is lapsed, the most work the bounds allow.
func topUp(ctx context.Context, rdb *redis.Client, key string, round int) {
	n, err := rdb.ZCard(ctx, key+"\x1fq").Result()
	must(err)
	p := rdb.Pipeline()
	for i := range scripts.LineMax - int(n) {
		id := fmt.Sprintf("u.%d.%d", round, i)
		scripts.Acquire.Run(ctx, p, []string{key}, "t"+id, holdTTL, id, -1-round, 40, 0)
	}
	_, err = p.Exec(ctx)
	must(err)
	time.Sleep(45 * time.Millisecond)
	if round == 0 {
		fmt.Printf("line filled: %s\n", footprint(ctx, rdb, key))
	}
}

// cycle runs a release of key held by "holder" (handing it on if a live
// waiter is first) and the holder's acquire of it again, and returns the
// server's time in each script (INFO commandstats).
func cycle(ctx context.Context, rdb *redis.Client, key string) (rel, acq time.Duration) {
	rel = served(ctx, rdb, func() {
		must(scripts.Release.Run(ctx, rdb, []string{key}, "holder", grace).Err())
	})
	rdb.Del(ctx, key) // a hand-off to a lapsed waiter, if any, must not hold the key
	acq = served(ctx, rdb, func() {
		must(scripts.Acquire.Run(ctx, rdb, []string{key}, "holder", holdTTL).Err())
	})
	return rel, acq
}

// served returns the time the server spent in the EVALSHA that f sends.
func served(ctx context.Context, rdb *redis.Client, f func()) time.Duration {
	must(rdb.ConfigResetStat(ctx).Err())
	f()
	info, err := rdb.Info(ctx, "commandstats").Result()
	must(err)
	i := strings.Index(info, "cmdstat_evalsha:calls=1,usec=")
	if i < 0 {
		log.Fatalf("no single EVALSHA in %q", info)
	}
	us, _ := strconv.Atoi(strings.SplitN(info[i+len("cmdstat_evalsha:calls=1,usec="):], ",", 2)[0])
	return time.Duration(us) * time.Microsecond
}

// footprint reports the line's sizes and the memory of its keys.
func footprint(ctx context.Context, rdb *redis.Client, key string) string {
	out := ""
	for _, suf := range []string{"q", "x", "g"} {
		k := key + "\x1f" + suf
		n, _ := rdb.ZCard(ctx, k).Result()
		m, _ := rdb.MemoryUsage(ctx, k).Result()
		out += fmt.Sprintf("%s %d entries %d KiB; ", suf, n, m/1024)
	}
	return out
}

// stats returns the p50, p99 and max of ds in µs.
func stats(ds []time.Duration) [3]float64 {
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	return [3]float64{us(ds[len(ds)/2]), us(ds[len(ds)*99/100]), us(ds[len(ds)-1])}
}

// start runs bin on a free loopback port without persistence.
func start(bin string) (*redis.Client, func(), error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	cmd := exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("start %s (install redis-server): %w", bin, err)
	}
	stop := func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + port})
	for deadline := time.Now().Add(5 * time.Second); rdb.Ping(context.Background()).Err() != nil; {
		if time.Now().After(deadline) {
			stop()
			return nil, nil, fmt.Errorf("redis-server on port %s did not answer", port)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return rdb, func() { rdb.Close(); stop() }, nil
}

func must(err error) {
	if err != nil && err != redis.Nil {
		log.Fatal(err)
	}
}
