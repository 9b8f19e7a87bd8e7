// Package testkit runs your code against real, independent Redis masters
// in Go tests, and breaks them while it runs: the test kit of quorumlock,
// for its own suite and for yours.
//
// Start starts N throw-away Redis 7 servers (no replication, no Redis
// Cluster mode) and removes them when the test ends. Each Node can be
// killed, stopped cleanly, restarted with or without its data, paused and
// resumed. A Proxy between one client and one node adds latency, holds
// traffic back and delivers it late (a command the client gave up on lands
// after all), cuts the link (blackhole) or resets its connections: faults
// between one client and one node, the others unaffected. DialClient,
// LockClient, ProxiedLockClient and Pools make quorumlock Clients and Pools
// over a Cluster.
//
// Package testkit/history records what the clients did (lock calls and
// critical sections) and checks the record: no two holders at once,
// fencing tokens in order, nothing left behind, linearizability. Package
// testkit/leakcheck fails a test binary that leaves goroutines behind.
//
// Two backends run the servers:
//
//   - "docker": one container per server, run with github.com/ory/dockertest/v3
//     and published on 127.0.0.1 only. The image is QUORUMLOCK_REDIS_IMAGE if
//     set, else a locally built quorumlock/redis-test:<hash> image if present,
//     else redis:7 if it is present or can be pulled within a few seconds, else
//     an image built FROM scratch out of the host's redis-server binary and
//     its shared libraries (no registry needed).
//   - "process": one redis-server process per server, listening on 127.0.0.1.
//
// Docker is preferred when its daemon answers; the process backend is used
// otherwise. QUORUMLOCK_REDIS_BACKEND=docker|process forces one of them.
// Either needs redis-server installed, or Docker with an image to run.
//
// Every server runs with "appendonly yes" and "appendfsync always", so a
// write acknowledged before a Kill survives Restart(false).
//
// The package is meant for tests on Linux (it uses Unix signals and /proc).
package testkit

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/quorumlock/quorumlock/internal/redisproc"
)

// Environment variables read by Start.
const (
	// EnvBackend forces a backend: "docker" or "process".
	EnvBackend = "QUORUMLOCK_REDIS_BACKEND"
	// EnvImage names the Docker image to use (repository[:tag]); it must
	// behave like the official redis image (the command "redis-server ARGS..."
	// must start the server).
	EnvImage = "QUORUMLOCK_REDIS_IMAGE"
)

// Backend names returned by Cluster.Backend.
const (
	BackendDocker  = "docker"
	BackendProcess = "process"
)

// ErrNotRunning is returned by Pause and Resume when the node is stopped.
var ErrNotRunning = errors.New("testkit: node is not running")

// Option configures Start. Options are plain values: applying them cannot
// fail and they may be shared between goroutines.
type Option func(*config)

type config struct {
	password string
	args     []string
	backend  string // "" = choose (environment, then auto); used by this package's tests
}

// WithPassword makes every server require pw ("requirepass"). Clients
// returned by Cluster.Clients and Start's readiness checks authenticate
// with it. It cannot fail.
func WithPassword(pw string) Option {
	return func(c *config) { c.password = pw }
}

// WithArgs appends extra redis-server configuration arguments, for example
// WithArgs("--maxmemory-policy", "noeviction"). They come after the
// package's own arguments, so for single-valued directives they win. Several
// WithArgs options accumulate. WithArgs itself cannot fail; arguments that
// redis-server rejects make Start fail the test, showing the server's log.
func WithArgs(args ...string) Option {
	return func(c *config) { c.args = append(c.args, args...) }
}

// withBackend forces a backend regardless of the environment (tests only).
func withBackend(name string) Option {
	return func(c *config) { c.backend = name }
}

// Cluster is a set of independent Redis servers (no replication, no Redis
// Cluster mode) started by Start. Its methods are safe for concurrent use
// and never fail; do not use a Cluster after its test's cleanup has run.
type Cluster struct {
	backend  string
	password string
	id       string
	dir      string // process backend: parent of the nodes' directories
	nodes    []*Node
}

// Node is one Redis server of a Cluster. Its address stays the same across
// Kill, Stop and Restart. All methods are safe for concurrent use; the fault
// methods (Kill, Stop, Restart, Pause, Resume) are serialized per node.
type Node struct {
	index    int
	addr     string
	password string

	mu    sync.Mutex
	state nodeState
	srv   server
}

type nodeState int

const (
	stateRunning nodeState = iota
	statePaused
	stateStopped
)

// server is what a backend implements for one node (the process backend is
// a *redisproc.Server). Calls are serialized by Node.mu.
type server interface {
	// Launch starts the server (again) on its port, with an empty dataset
	// if amnesia is set. It does not wait for readiness.
	Launch(amnesia bool) error
	// Exited reports a non-nil error once the last launched server is known
	// to have exited.
	Exited() error
	Kill() error
	Stop() error
	Pause() error
	Resume() error
	// Remove stops the server for good and frees everything it holds.
	Remove() error
	// LogTail returns the last lines of the server's log, for diagnostics.
	LogTail() string
}

// Start starts n independent Redis servers and registers a t.Cleanup that
// stops and removes everything it started (containers, processes, temporary
// directories; failures there are reported with t.Errorf). The servers
// start in parallel, and Start returns once every one answers PING.
//
// The backend is chosen as described in the package documentation and
// logged with t.Logf. Start fails the test with t.Fatalf (it never skips)
// when n < 1, when QUORUMLOCK_REDIS_BACKEND has an unknown value or names a
// backend that does not work, or when neither backend works; the message
// says how to get Docker or redis-server. Start may be called from parallel
// tests.
func Start(t testing.TB, n int, opts ...Option) *Cluster {
	t.Helper()
	if n < 1 {
		t.Fatalf("testkit.Start: n must be at least 1, got %d", n)
	}
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	forced, forcedBy := forcedBackend(t, cfg)
	c := &Cluster{password: cfg.password, id: newClusterID()}
	t.Cleanup(func() { c.cleanup(t) })
	begin := time.Now()

	var dockerErr error
	if forced != BackendProcess {
		image, err := c.tryDocker(t, n, cfg, forced == "")
		if err == nil {
			t.Logf("testkit: %d redis servers via docker (image %s) in %v: %s",
				n, image, time.Since(begin).Round(time.Millisecond), strings.Join(c.Addrs(), " "))
			return c
		}
		dockerErr = err
		if forced == BackendDocker {
			t.Fatalf("testkit: Docker backend forced by %s does not work: %v\n%s", forcedBy, err, installHint)
		}
		t.Logf("testkit: Docker backend unusable (%v); falling back to redis-server processes", err)
	}

	bin, err := redisproc.FindBinary()
	if err != nil {
		if dockerErr != nil {
			t.Fatalf("testkit: no Redis backend works.\n  docker: %v\n  process: %v\n%s", dockerErr, err, installHint)
		}
		t.Fatalf("testkit: process backend forced by %s does not work: %v\n%s", forcedBy, err, installHint)
	}
	if err := c.startProcesses(bin, n, cfg); err != nil {
		t.Fatalf("testkit: starting redis-server processes: %v", err)
	}
	t.Logf("testkit: %d redis servers via process (%s) in %v: %s",
		n, bin, time.Since(begin).Round(time.Millisecond), strings.Join(c.Addrs(), " "))
	return c
}

// forcedBackend returns the backend the test or the environment forces
// ("" for none) and who forced it; it fails the test on an unknown name.
func forcedBackend(t testing.TB, cfg config) (forced, by string) {
	t.Helper()
	forced, by = cfg.backend, "the test"
	if forced == "" {
		forced = strings.TrimSpace(os.Getenv(EnvBackend))
		by = EnvBackend + "=" + forced
	}
	switch forced {
	case "", BackendDocker, BackendProcess:
	default:
		t.Fatalf("testkit: %s=%q: want %q or %q", EnvBackend, forced, BackendDocker, BackendProcess)
	}
	return forced, by
}

// tryDocker starts the nodes as containers and returns the image. On
// failure it removes what it started and, when the backend was chosen
// rather than forced (auto), marks Docker broken for later clusters.
func (c *Cluster) tryDocker(t testing.TB, n int, cfg config, auto bool) (string, error) {
	env, err := dockerEnvironment(t.Logf)
	if err != nil {
		return "", err
	}
	if err := c.startDocker(env, n, cfg); err != nil {
		c.removeNodes(t) // do not leave a half-started cluster behind
		if auto {
			markDockerBroken(err)
		}
		return "", err
	}
	return env.image, nil
}

const installHint = `To run these tests, either install Docker and make sure "docker info" works for this user
(https://docs.docker.com/engine/install/; no registry access is needed when redis-server is installed,
the image is built locally from it), or install Redis 7 so that redis-server is in PATH
("apt-get install redis-server" on Debian/Ubuntu, "brew install redis" on macOS).`

// startNodes creates n nodes in parallel with newSrv and waits until all
// answer PING. Nodes are recorded in c.nodes even on failure, so cleanup
// removes them.
func (c *Cluster) startNodes(n int, newSrv func(i, port int) (server, error)) error {
	c.nodes = make([]*Node, n)
	var g errgroup.Group
	for i := range n {
		g.Go(func() error {
			srv, port, err := redisproc.StartOnFreePort(func(port int) (server, error) { return newSrv(i, port) }, c.password)
			if err != nil {
				return fmt.Errorf("node %d: %w", i, err)
			}
			c.nodes[i] = &Node{index: i, addr: redisproc.Addr(port), password: c.password, srv: srv}
			return nil
		})
	}
	err := g.Wait()
	if err != nil {
		// Keep the started ones for cleanup, drop holes.
		kept := c.nodes[:0]
		for _, nd := range c.nodes {
			if nd != nil {
				kept = append(kept, nd)
			}
		}
		c.nodes = kept
	}
	return err
}

// cleanup removes every node; registered with t.Cleanup by Start.
func (c *Cluster) cleanup(t testing.TB) {
	c.removeNodes(t)
	if c.backend == BackendDocker {
		dockerCleanupIdle()
	}
	if c.dir != "" {
		if err := os.RemoveAll(c.dir); err != nil {
			t.Errorf("testkit: removing %s: %v", c.dir, err)
		}
	}
}

func (c *Cluster) removeNodes(t testing.TB) {
	var wg sync.WaitGroup
	for _, nd := range c.nodes {
		if nd == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			nd.mu.Lock()
			defer nd.mu.Unlock()
			if err := nd.srv.Remove(); err != nil {
				t.Errorf("testkit: removing node %d (%s): %v", nd.index, nd.addr, err)
			}
			nd.state = stateStopped
		}()
	}
	wg.Wait()
	c.nodes = nil
}

// Backend returns the backend that runs the servers: "docker" or "process".
func (c *Cluster) Backend() string { return c.backend }

// Len returns the number of nodes.
func (c *Cluster) Len() int { return len(c.nodes) }

// Node returns node i (0 <= i < Len()); it panics if i is out of range.
func (c *Cluster) Node(i int) *Node { return c.nodes[i] }

// Addrs returns the "127.0.0.1:PORT" address of every node, in node order.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.nodes))
	for i, nd := range c.nodes {
		out[i] = nd.addr
	}
	return out
}

// Clients returns one new go-redis client per node, connected directly to
// it (no proxy), configured as by NewClient with the cluster password. The
// clients are closed by a t.Cleanup. Clients does not contact the servers
// and cannot fail; each call returns new clients.
func (c *Cluster) Clients(t testing.TB) []*redis.Client {
	out := make([]*redis.Client, len(c.nodes))
	for i, nd := range c.nodes {
		out[i] = NewClient(nd.addr, c.password)
	}
	t.Cleanup(func() {
		for _, cl := range out {
			_ = cl.Close()
		}
	})
	return out
}

// NewClient returns a go-redis client for addr (a node or a Proxy address)
// with password pw (may be empty), ContextTimeoutEnabled set and no
// retries: MaxRetries -1, and DialerRetries 1 so that a command to a
// stopped node fails at once with "connection refused" instead of after
// go-redis's default five dial attempts. The caller closes it. It does not
// contact the server and cannot fail.
func NewClient(addr, pw string) *redis.Client { return redisproc.NewClient(addr, pw) }

// Addr returns the node's "127.0.0.1:PORT" address; it does not change
// across Kill, Stop and Restart.
func (n *Node) Addr() string { return n.addr }

// Kill kills the server with SIGKILL (docker kill -s KILL for the docker
// backend) and returns once it has exited; a paused node is killed too.
// Killing a stopped node does nothing. The error reports a failure to
// signal the server or to see it exit.
func (n *Node) Kill() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.state == stateStopped {
		return nil
	}
	if err := n.srv.Kill(); err != nil {
		return fmt.Errorf("testkit: kill node %d: %w", n.index, err)
	}
	n.state = stateStopped
	return nil
}

// Stop shuts the server down cleanly (SIGTERM, so Redis flushes its append
// only file; SIGKILL after 10 s) and returns once it has exited. A paused
// node is resumed first; stopping a stopped node does nothing.
func (n *Node) Stop() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	switch n.state {
	case stateStopped:
		return nil
	case statePaused:
		if err := n.srv.Resume(); err != nil {
			return fmt.Errorf("testkit: stop node %d: resume: %w", n.index, err)
		}
		n.state = stateRunning
	}
	if err := n.srv.Stop(); err != nil {
		return fmt.Errorf("testkit: stop node %d: %w", n.index, err)
	}
	n.state = stateStopped
	return nil
}

// Restart starts the server again on the same address and returns once it
// answers PING. A node that is still running or paused is killed first.
// With amnesia false the dataset is kept (everything acknowledged before a
// Kill or Stop is still there); with amnesia true the server starts with an
// empty dataset. On failure (for example the port was taken meanwhile, or
// the server did not answer within 30 s) the node is left stopped and the
// error includes the end of the server's log.
func (n *Node) Restart(amnesia bool) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.state != stateStopped {
		if err := n.srv.Kill(); err != nil {
			return fmt.Errorf("testkit: restart node %d: kill: %w", n.index, err)
		}
		n.state = stateStopped
	}
	if err := n.srv.Launch(amnesia); err != nil {
		return fmt.Errorf("testkit: restart node %d: %w", n.index, err)
	}
	if err := n.waitReady(); err != nil {
		_ = n.srv.Kill()
		return fmt.Errorf("testkit: restart node %d: %w", n.index, err)
	}
	n.state = stateRunning
	return nil
}

// Pause freezes the server (docker pause / SIGSTOP): its sockets stay open
// and connections are accepted by the kernel, but nothing is answered until
// Resume. Pausing a paused node does nothing; pausing a stopped node
// returns ErrNotRunning.
func (n *Node) Pause() error {
	return n.freeze(statePaused, "pause", func() error { return n.srv.Pause() })
}

// Resume unfreezes a paused server (docker unpause / SIGCONT). Resuming a
// running node does nothing; resuming a stopped node returns ErrNotRunning.
func (n *Node) Resume() error {
	return n.freeze(stateRunning, "resume", func() error { return n.srv.Resume() })
}

// freeze moves a node that is not stopped to state want (paused or
// running) with do, under the node's lock.
func (n *Node) freeze(want nodeState, what string, do func() error) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	switch n.state {
	case want:
		return nil
	case stateStopped:
		return ErrNotRunning
	}
	if err := do(); err != nil {
		return fmt.Errorf("testkit: %s node %d: %w", what, n.index, err)
	}
	n.state = want
	return nil
}

// Proxy starts a new in-process TCP proxy from 127.0.0.1:<random port> to
// this node and registers a t.Cleanup that closes it. Use one proxy per
// (client, node) pair so faults can be injected between one client and one
// node. Proxy fails the test with t.Fatalf if it cannot listen.
func (n *Node) Proxy(t testing.TB) *Proxy {
	t.Helper()
	return NewProxy(t, n.addr)
}

// waitReady waits until the node answers PING (redisproc.WaitReady).
func (n *Node) waitReady() error { return redisproc.WaitReady(n.srv, n.addr, n.password) }

var clusterSeq struct {
	sync.Mutex
	n int
}

func newClusterID() string {
	clusterSeq.Lock()
	defer clusterSeq.Unlock()
	clusterSeq.n++
	return strconv.Itoa(clusterSeq.n)
}

// redisArgs are the arguments shared by both backends.
func redisArgs(cfg config) []string { return redisproc.Args(cfg.password, cfg.args) }
