package testkit

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	dc "github.com/ory/dockertest/v3/docker"
	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/internal/redisproc"
	"github.com/quorumlock/quorumlock/testkit/leakcheck"
)

func TestMain(m *testing.M) {
	os.Exit(leakcheck.Run(m)) // waits for go-redis' dial probes of closed clients
}

const testPassword = "s3cret"

// TestCluster runs the same fault scenario on every backend that works here.
func TestCluster(t *testing.T) {
	for _, backend := range []string{BackendDocker, BackendProcess} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			switch backend {
			case BackendDocker:
				if _, err := dockerEnvironment(t.Logf); err != nil {
					t.Skipf("Docker backend not usable here: %v", err)
				}
			case BackendProcess:
				if _, err := redisproc.FindBinary(); err != nil {
					t.Skipf("process backend not usable here: %v", err)
				}
			}
			var c *Cluster
			t.Run("faults", func(t *testing.T) {
				c = Start(t, 5, withBackend(backend), WithPassword(testPassword),
					WithArgs("--maxmemory-policy", "noeviction"))
				scenario(t, c, backend)
			})
			if c != nil {
				checkGone(t, c, backend)
			}
		})
	}
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// faultRun is the fault scenario on one cluster: each step a subtest.
type faultRun struct {
	c   *Cluster
	cls []*redis.Client
}

func scenario(t *testing.T, c *Cluster, backend string) {
	if c.Backend() != backend || c.Len() != 5 {
		t.Fatalf("Backend()=%q Len()=%d, want %q 5", c.Backend(), c.Len(), backend)
	}
	cls := c.Clients(t)
	for i, cl := range cls {
		if err := cl.Ping(ctxT(t, 2*time.Second)).Err(); err != nil {
			t.Fatalf("PING node %d (%s): %v", i, c.Node(i).Addr(), err)
		}
	}
	// Options reached the servers.
	if got, err := cls[0].ConfigGet(ctxT(t, 2*time.Second), "maxmemory-policy").Result(); err != nil || got["maxmemory-policy"] != "noeviction" {
		t.Fatalf("CONFIG GET maxmemory-policy = %v, %v; want noeviction", got, err)
	}
	noAuth := NewClient(c.Node(0).Addr(), "")
	defer noAuth.Close()
	if err := noAuth.Ping(ctxT(t, 2*time.Second)).Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Fatalf("PING without password: err = %v, want NOAUTH", err)
	}

	r := faultRun{c: c, cls: cls}
	t.Run("kill-restart-keeps-data", r.killRestartKeepsData)
	t.Run("stop-restart-keeps-data", r.stopRestartKeepsData)
	t.Run("restart-amnesia", r.restartAmnesia)
	t.Run("pause-resume", r.pauseResume)
	t.Run("proxy", r.proxyFaults)
	t.Run("proxy-late", r.proxyLate)
	t.Run("proxy-kill", r.proxyKill)
}

// killRestartKeepsData: a killed node comes back on its address with its data.
func (r faultRun) killRestartKeepsData(t *testing.T) {
	n, cl := r.c.Node(1), r.cls[1]
	addr := n.Addr()
	mustSet(t, cl, "k1", "v1")
	if err := n.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := cl.Ping(ctxT(t, time.Second)).Err(); err == nil {
		t.Fatal("PING succeeded on a killed node")
	}
	if err := n.Restart(false); err != nil {
		t.Fatal(err)
	}
	if n.Addr() != addr {
		t.Fatalf("address changed: %s -> %s", addr, n.Addr())
	}
	wantGet(t, cl, "k1", "v1")
}

// stopRestartKeepsData: a stopped node (stopping twice is harmless; a stopped node cannot be paused) comes back with its data.
func (r faultRun) stopRestartKeepsData(t *testing.T) {
	n, cl := r.c.Node(2), r.cls[2]
	mustSet(t, cl, "k2", "v2")
	if err := n.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := n.Stop(); err != nil { // idempotent
		t.Fatal(err)
	}
	if err := n.Pause(); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("Pause of stopped node: %v, want ErrNotRunning", err)
	}
	if err := n.Restart(false); err != nil {
		t.Fatal(err)
	}
	wantGet(t, cl, "k2", "v2")
}

// restartAmnesia: a node restarted with amnesia comes back empty, and persistent again.
func (r faultRun) restartAmnesia(t *testing.T) {
	n, cl := r.c.Node(1), r.cls[1]
	mustSet(t, cl, "k3", "v3")
	if err := n.Restart(true); err != nil { // running: killed first
		t.Fatal(err)
	}
	for _, k := range []string{"k1", "k3"} {
		if err := cl.Get(ctxT(t, 2*time.Second), k).Err(); err != redis.Nil {
			t.Fatalf("GET %s after Restart(true): %v, want redis.Nil", k, err)
		}
	}
	// Still persistent afterwards.
	mustSet(t, cl, "k4", "v4")
	if err := n.Restart(false); err != nil {
		t.Fatal(err)
	}
	wantGet(t, cl, "k4", "v4")
}

// pauseResume: a paused node answers nothing until resumed, and can be killed and restarted.
func (r faultRun) pauseResume(t *testing.T) {
	n, cl := r.c.Node(3), r.cls[3]
	mustSet(t, cl, "k5", "v5")
	if err := n.Pause(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err := cl.Get(ctxT(t, 200*time.Millisecond), "k5").Err()
	if err == nil {
		t.Fatal("GET on a paused node succeeded")
	}
	t.Logf("GET on paused node: %v after %v", err, time.Since(start).Round(time.Millisecond))
	if err := n.Resume(); err != nil {
		t.Fatal(err)
	}
	wantGet(t, cl, "k5", "v5")

	// A paused node can be killed and restarted.
	if err := n.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := n.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := n.Restart(false); err != nil {
		t.Fatal(err)
	}
	wantGet(t, cl, "k5", "v5")
}

// proxied returns node 4, a new proxy to it and a client through the
// proxy, which answers PING.
func (r faultRun) proxied(t *testing.T) (*Node, *Proxy, *redis.Client) {
	n := r.c.Node(4)
	p := n.Proxy(t)
	if p.Addr() == n.Addr() {
		t.Fatal("proxy address equals node address")
	}
	pc := NewClient(p.Addr(), testPassword)
	t.Cleanup(func() { pc.Close() })
	if err := pc.Ping(ctxT(t, 2*time.Second)).Err(); err != nil {
		t.Fatalf("PING via proxy: %v", err)
	}
	return n, p, pc
}

// proxyFaults: a proxy adds latency, blackholes and resets connections.
func (r faultRun) proxyFaults(t *testing.T) {
	_, p, pc := r.proxied(t)
	const lat = 100 * time.Millisecond
	p.SetLatency(lat)
	start := time.Now()
	if err := pc.Ping(ctxT(t, 5*time.Second)).Err(); err != nil {
		t.Fatalf("PING with latency: %v", err)
	}
	if took := time.Since(start); took < 2*lat {
		t.Fatalf("PING with %v latency each way took %v, want >= %v", lat, took, 2*lat)
	}
	p.SetLatency(0)

	p.Blackhole(true)
	err := pc.Ping(ctxT(t, 300*time.Millisecond)).Err()
	if err == nil {
		t.Fatal("PING through a blackhole succeeded")
	}
	if !isTimeout(err) {
		t.Fatalf("PING through a blackhole: %v, want a timeout", err)
	}
	p.Blackhole(false)
	if err := pc.Ping(ctxT(t, 2*time.Second)).Err(); err != nil {
		t.Fatalf("PING after blackhole: %v", err)
	}

	conn := pc.Conn()
	defer conn.Close()
	if err := conn.Ping(ctxT(t, 2*time.Second)).Err(); err != nil {
		t.Fatal(err)
	}
	p.Reset()
	if err := conn.Ping(ctxT(t, 2*time.Second)).Err(); err == nil {
		t.Fatal("PING on a reset connection succeeded")
	} else {
		t.Logf("PING on reset connection: %v", err)
	}
	if err := pc.Ping(ctxT(t, 2*time.Second)).Err(); err != nil {
		t.Fatalf("PING on a new connection after Reset: %v", err)
	}

}

// proxyLate: what a proxy holds lands on Deliver.
func (r faultRun) proxyLate(t *testing.T) {
	_, p, pc := r.proxied(t)
	// Late delivery: a SET written while the link is held times out
	// for the client, which drops the connection; a new connection
	// works meanwhile (HoldOpen); the SET lands on Deliver.
	direct := r.cls[4]
	p.Hold(HoldOpen)
	if err := pc.Set(ctxT(t, 200*time.Millisecond), "late", "v", 0).Err(); !isTimeout(err) {
		t.Fatalf("SET through a held link: %v, want a timeout", err)
	}
	if err := pc.Ping(ctxT(t, 2*time.Second)).Err(); err != nil {
		t.Fatalf("PING on a new connection while the old one is held: %v", err)
	}
	if n, err := direct.Exists(ctxT(t, 2*time.Second), "late").Result(); err != nil || n != 0 {
		t.Fatalf("EXISTS late before Deliver = %d, %v; want 0", n, err)
	}
	if n := p.Deliver(); n == 0 {
		t.Fatal("Deliver wrote nothing: the timed-out SET was not held")
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		got, err := direct.Get(ctxT(t, 2*time.Second), "late").Result()
		if err == nil && got == "v" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET late after Deliver = %q, %v; want the late SET's v", got, err)
		}
		time.Sleep(5 * time.Millisecond)
	}

}

// proxyKill: a proxy follows its node through a kill and a restart.
func (r faultRun) proxyKill(t *testing.T) {
	n, _, pc := r.proxied(t)
	// A killed node refuses through the proxy too.
	if err := n.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := pc.Ping(ctxT(t, time.Second)).Err(); err == nil {
		t.Fatal("PING via proxy to a killed node succeeded")
	}
	if err := n.Restart(false); err != nil {
		t.Fatal(err)
	}
	if err := pc.Ping(ctxT(t, 2*time.Second)).Err(); err != nil {
		t.Fatalf("PING via proxy after restart: %v", err)
	}
}

func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var te interface{ Timeout() bool }
	return errors.As(err, &te) && te.Timeout()
}

func mustSet(t *testing.T, cl *redis.Client, k, v string) {
	t.Helper()
	if err := cl.Set(ctxT(t, 2*time.Second), k, v, 0).Err(); err != nil {
		t.Fatalf("SET %s: %v", k, err)
	}
}

func wantGet(t *testing.T, cl *redis.Client, k, want string) {
	t.Helper()
	got, err := cl.Get(ctxT(t, 2*time.Second), k).Result()
	if err != nil || got != want {
		t.Fatalf("GET %s = %q, %v; want %q", k, got, err, want)
	}
}

// checkGone verifies that the cleanup of c left nothing running.
func checkGone(t *testing.T, c *Cluster, backend string) {
	t.Helper()
	switch backend {
	case BackendDocker:
		env, err := dockerEnvironment(t.Logf)
		if err != nil {
			t.Fatal(err)
		}
		defer dockerCleanupIdle()
		list, err := env.pool.Client.ListContainers(dc.ListContainersOptions{
			All:     true,
			Filters: map[string][]string{"label": {labelCluster + "=" + runID + "-" + c.id}},
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, ct := range list {
			t.Errorf("container left after cleanup: %s %v %s", ct.ID[:12], ct.Names, ct.Status)
		}
	case BackendProcess:
		if _, err := os.Stat(c.dir); !os.IsNotExist(err) {
			t.Errorf("cluster directory %s still there (%v)", c.dir, err)
		}
		for _, pid := range childRedisPids() {
			t.Errorf("redis-server child process %d left after cleanup (running or zombie)", pid)
		}
	}
}

// childRedisPids lists processes (including zombies) whose parent is this
// test binary and whose name mentions redis.
func childRedisPids() []int {
	var out []int
	matches, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, m := range matches {
		b, err := os.ReadFile(m)
		if err != nil {
			continue
		}
		s := string(b)
		i, j := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if i < 0 || j < i {
			continue
		}
		f := strings.Fields(s[j+1:]) // state, ppid, ...
		if len(f) < 2 || f[1] != strconv.Itoa(os.Getpid()) || !strings.Contains(s[i+1:j], "redis") {
			continue
		}
		pid, _ := strconv.Atoi(strings.TrimSpace(s[:i]))
		out = append(out, pid)
	}
	return out
}

// fakeTB records Fatalf instead of failing, to test Start's error paths.
type fakeTB struct {
	testing.TB
	mu       sync.Mutex
	fatal    string
	cleanups []func()
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.fatal = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}
func (f *fakeTB) Cleanup(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cleanups = append(f.cleanups, fn)
}

// startFatal runs Start with a fakeTB and returns its Fatalf message.
func startFatal(t *testing.T, opts ...Option) string {
	f := &fakeTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Start(f, 1, opts...)
	}()
	<-done
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
	return f.fatal
}

// TestBackendSelection checks the choice made without a forced backend
// and with QUORUMLOCK_REDIS_BACKEND.
func TestBackendSelection(t *testing.T) {
	want := BackendDocker
	if _, err := dockerEnvironment(t.Logf); err != nil {
		want = BackendProcess
	}
	t.Run("auto", func(t *testing.T) {
		t.Setenv(EnvBackend, "")
		if got := Start(t, 1).Backend(); got != want {
			t.Fatalf("Backend() = %q, want %q", got, want)
		}
	})
	t.Run("env-process", func(t *testing.T) {
		if _, err := redisproc.FindBinary(); err != nil {
			t.Skip(err)
		}
		t.Setenv(EnvBackend, BackendProcess)
		if got := Start(t, 1).Backend(); got != BackendProcess {
			t.Fatalf("Backend() = %q, want process", got)
		}
	})
}

func TestStartErrors(t *testing.T) {
	t.Run("bad-backend", func(t *testing.T) {
		t.Setenv(EnvBackend, "podman")
		if msg := startFatal(t); !strings.Contains(msg, EnvBackend) {
			t.Fatalf("Fatalf message %q does not name %s", msg, EnvBackend)
		}
	})
	t.Run("no-redis-server", func(t *testing.T) {
		t.Setenv("PATH", t.TempDir())
		msg := startFatal(t, withBackend(BackendProcess))
		for _, want := range []string{"redis-server", "apt-get install redis-server", "Docker"} {
			if !strings.Contains(msg, want) {
				t.Fatalf("Fatalf message %q lacks %q", msg, want)
			}
		}
		t.Logf("message: %s", msg)
	})
}

// TestRemoveLeftovers checks that only containers whose owner is gone are
// removed.
func TestRemoveLeftovers(t *testing.T) {
	env, err := dockerEnvironment(t.Logf)
	if err != nil {
		t.Skipf("Docker backend not usable here: %v", err)
	}
	t.Cleanup(dockerCleanupIdle)
	// A pid that surely belongs to no process any more: a reaped child.
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	deadPid := cmd.Process.Pid

	create := func(name string, pid int, start string) string {
		labels := ownerLabels("leftover-test")
		labels[labelPid] = strconv.Itoa(pid)
		labels[labelPidStart] = start
		ct, err := env.pool.Client.CreateContainer(dc.CreateContainerOptions{
			Name:   fmt.Sprintf("quorumlock-redis-%s-leftover-%s", runID, name),
			Config: &dc.Config{Image: env.image, Cmd: []string{"redis-server"}, Labels: labels},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = env.pool.Client.RemoveContainer(dc.RemoveContainerOptions{ID: ct.ID, Force: true})
		})
		return ct.ID
	}
	dead := create("dead", deadPid, "")
	reused := create("reused", os.Getpid(), "1") // our pid, another start time
	ours := create("ours", os.Getpid(), redisproc.ProcessStartTime(os.Getpid()))

	if _, err := removeLeftovers(env.pool); err != nil {
		t.Fatal(err)
	}
	exists := func(id string) bool {
		_, err := env.pool.Client.InspectContainer(id)
		return err == nil
	}
	if exists(dead) {
		t.Error("container of a dead pid was not removed")
	}
	if exists(reused) {
		t.Error("container of a reused pid was not removed")
	}
	if !exists(ours) {
		t.Error("container of this live test binary was removed")
	}
}
