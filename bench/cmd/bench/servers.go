package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// server is one redis-server process this command started.
type server struct {
	addr string
	cmd  *exec.Cmd
}

// startServers starts n redis-server processes on free loopback ports,
// without persistence, with extra arguments, and waits until each answers
// PING. On error it stops those already started.
func startServers(ctx context.Context, bin string, n int, extra ...string) ([]*server, error) {
	var srvs []*server
	for range n {
		s, err := startServer(ctx, bin, extra...)
		if err != nil {
			stopServers(srvs)
			return nil, err
		}
		srvs = append(srvs, s)
	}
	return srvs, nil
}

func startServer(ctx context.Context, bin string, extra ...string) (*server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning",
		"--maxclients", "2000"}, extra...)...)
	cmd.Stdout, cmd.Stderr = io.Discard, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // Ctrl-C goes to us, not to the servers
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s (install redis-server, or pass -redis-server): %w", bin, err)
	}
	s := &server{addr: "127.0.0.1:" + strconv.Itoa(port), cmd: cmd}
	rdb := redis.NewClient(&redis.Options{Addr: s.addr, MaxRetries: -1})
	defer rdb.Close()
	for deadline := time.Now().Add(5 * time.Second); ; {
		if err := rdb.Ping(ctx).Err(); err == nil {
			return s, nil
		} else if time.Now().After(deadline) || ctx.Err() != nil {
			stopServers([]*server{s})
			return nil, fmt.Errorf("redis-server on %s did not answer: %w", s.addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// serversReads returns how many reads from their clients the servers have
// processed so far (INFO stats, total_reads_processed), summed: the fewer
// per cycle, the deeper the pipelines they were sent.
func serversReads(srvs []*server) (int64, error) {
	var sum int64
	for _, s := range srvs {
		c := redis.NewClient(&redis.Options{Addr: s.addr})
		info, err := c.Info(context.Background(), "stats").Result()
		_ = c.Close()
		if err != nil {
			return 0, err
		}
		_, rest, ok := strings.Cut(info, "total_reads_processed:")
		n, err := strconv.ParseInt(strings.TrimSpace(strings.SplitN(rest, "\n", 2)[0]), 10, 64)
		if !ok || err != nil {
			return 0, fmt.Errorf("%s: no total_reads_processed in INFO stats", s.addr)
		}
		sum += n // and this connection's own, a few against thousands
	}
	return sum, nil
}

// cpu returns the CPU time (user + system) the server process has used so
// far, from /proc/<pid>/stat.
func (s *server) cpu() (time.Duration, error) {
	f, err := procStat(fmt.Sprintf("/proc/%d/stat", s.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	var ticks int64
	for _, v := range f[11:13] { // fields 14 and 15: utime, stime
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("redis-server %s: utime or stime %q: %w", s.addr, v, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// procStat returns the fields of a /proc stat file after the command name:
// f[0] is field 3 (state), f[n-3] field n.
func procStat(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')') // the command name may hold spaces
	if i < 0 {
		return nil, fmt.Errorf("%s: no command name", path)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 17 {
		return nil, fmt.Errorf("%s: too few fields", path)
	}
	return f, nil
}

// stopServers stops the processes by pid and waits for them.
func stopServers(srvs []*server) {
	for _, s := range srvs {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, s := range srvs {
		done := make(chan struct{})
		go func() { _ = s.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(3 * time.Second):
			_ = s.cmd.Process.Kill()
			<-done
		}
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// delayProxy forwards TCP connections to one server and holds every chunk of
// the server's replies for delay before passing it on: that node is delay
// slower than the others for every client that goes through the proxy.
type delayProxy struct {
	l      net.Listener
	target string
	delay  time.Duration

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func newDelayProxy(target string, delay time.Duration) (*delayProxy, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &delayProxy{l: l, target: target, delay: delay, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	return p, nil
}

func (p *delayProxy) addr() string { return p.l.Addr().String() }

func (p *delayProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *delayProxy) accept() {
	for {
		down, err := p.l.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			down.Close()
			continue
		}
		if !p.track(down) || !p.track(up) {
			down.Close()
			up.Close()
			return
		}
		p.wg.Go(func() { _, _ = io.Copy(up, down); up.Close(); down.Close() })
		p.wg.Go(func() { p.delayed(down, up); up.Close(); down.Close() })
	}
}

type chunk struct {
	due time.Time
	buf *[]byte
	n   int
}

var bufs = sync.Pool{New: func() any { b := make([]byte, 16<<10); return &b }}

// delayed copies from src to dst, each chunk delay after it was read.
func (p *delayProxy) delayed(dst, src net.Conn) {
	ch := make(chan chunk, 4096)
	var wg sync.WaitGroup
	wg.Go(func() {
		for c := range ch {
			if d := time.Until(c.due); d > 0 {
				time.Sleep(d)
			}
			_, err := dst.Write((*c.buf)[:c.n])
			bufs.Put(c.buf)
			if err != nil {
				src.Close()
				for c := range ch {
					bufs.Put(c.buf)
				}
				return
			}
		}
	})
	for {
		b := bufs.Get().(*[]byte)
		n, err := src.Read(*b)
		if n > 0 {
			ch <- chunk{due: time.Now().Add(p.delay), buf: b, n: n}
		} else {
			bufs.Put(b)
		}
		if err != nil {
			break
		}
	}
	close(ch)
	wg.Wait()
}

// close stops the proxy and joins its goroutines.
func (p *delayProxy) close() {
	p.l.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
	p.wg.Wait()
}
