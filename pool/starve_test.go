package pool

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/internal/stall"
)

// starver makes the connections of a Pool whose reads or writes can be held
// off the CPU: the next read (or write) of any of its connections sleeps
// for the time set, as the goroutine doing it would if the process were
// starved, and the stall clock stands still as long (stall.Freeze), as it
// would too. It counts the connections closed, by whoever closes them.
type starver struct {
	read, write atomic.Int64 // ns: hold the next read (write) this long
	dials       atomic.Int32
	closed      atomic.Int32
}

func (s *starver) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	cn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	s.dials.Add(1)
	return &heldConn{Conn: cn, s: s}, nil
}

type heldConn struct {
	net.Conn
	s      *starver
	closed atomic.Bool
}

func hold(ns *atomic.Int64) {
	if d := time.Duration(ns.Swap(0)); d > 0 {
		stall.Freeze(d)
		time.Sleep(d)
	}
}

func (c *heldConn) Read(b []byte) (int, error) {
	hold(&c.s.read)
	return c.Conn.Read(b)
}

func (c *heldConn) Write(b []byte) (int, error) {
	hold(&c.s.write)
	return c.Conn.Write(b)
}

func (c *heldConn) Close() error {
	if c.closed.CompareAndSwap(false, true) {
		c.s.closed.Add(1)
	}
	return c.Conn.Close()
}

// starvedPool is a Pool from Dial on a miniredis whose connections s makes;
// its set-up budget (DialTimeout) is short, so that only the stand-still
// rule can keep a connection through a long hold.
func starvedPool(t *testing.T, s *starver, opts ...Option) (*miniredis.Miniredis, Pool) {
	t.Helper()
	m := miniredis.RunT(t)
	p, err := Dial(&redis.Options{Addr: m.Addr(), Dialer: s.dial, DialTimeout: 100 * time.Millisecond}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return m, p
}

// send sends a GET of k with a 50 ms deadline, followed 100 ms after it,
// and returns its result.
func send(t *testing.T, p Pool, k string) node.Result {
	t.Helper()
	box := newInbox(1)
	p.(node.Sender).Send(node.New(node.Op{Kind: node.Get, Key: k, Follow: 100 * time.Millisecond}), time.Now().Add(50*time.Millisecond), box, 0)
	return box.wait(t)[0]
}

// warm sets up p's first connection (dial, HELLO, the guard's INFO), and
// waits out its set-up budget.
func warm(t *testing.T, p Pool) {
	t.Helper()
	if r := send(t, p, "warm"); r.Err != nil && r.Err != redis.Nil {
		t.Fatalf("first command: %+v", r)
	}
	p.(*redisPool).w.wg.Wait() // the connections set up ahead of need
	time.Sleep(150 * time.Millisecond)
}

// TestStarvedReaderKeepsConnection: the process stands still for 500 ms
// while a batch's reply is on its way, well past the batch's deadline and
// Follow (150 ms). The reply was there all along: it is read, on the
// connection it was sent on, and no connection is closed. go-redis closed
// the connection on the read's timeout, and the command's fate was lost
// (issue 32: a starved client closed 19-49 connections a minute).
func TestStarvedReaderKeepsConnection(t *testing.T) {
	var s starver
	m, p := starvedPool(t, &s)
	m.Set("k", "v")
	warm(t, p)
	dials := s.dials.Load()
	s.read.Store(int64(500 * time.Millisecond))
	if r := send(t, p, "k"); r.Err != nil || r.Str != "v" {
		t.Fatalf("GET whose reader stood still 500 ms: %+v, want \"v\"", r)
	}
	if n := s.closed.Load(); n != 0 {
		t.Fatalf("%d connections closed; want 0", n)
	}
	if r := send(t, p, "k"); r.Err != nil || r.Str != "v" || s.dials.Load() != dials {
		t.Fatalf("next GET: %+v after %d dials (%d before); want \"v\" and no new dial", r, s.dials.Load(), dials)
	}
}

// TestStarvedRunIDKeepsConnection: RunID (the Client's identity check)
// follows the same rule as a batch. The process stands still for 500 ms
// before its INFO is written, past the call's 50 ms deadline; the server
// then takes 20 ms to answer. The INFO is written and its answer read, and
// no connection is closed: the call's deadline moved by the stand-still.
// Its INFO went straight to go-redis under the caller's deadline, which
// had passed by the time it was written, and its connection was closed.
func TestStarvedRunIDKeepsConnection(t *testing.T) {
	var s starver
	_, p := slowPool(t, &s, 20*time.Millisecond)
	stall.Hold() // the clock runs, as it does while any command of the process is in flight
	defer stall.Done()
	s.write.Store(int64(500 * time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := p.RunID(ctx); err != nil { // miniredis has no run_id: ""
		t.Fatalf("RunID whose writer stood still 500 ms: %v; want its answer", err)
	}
	if n := s.closed.Load(); n != 0 {
		t.Fatalf("%d connections closed; want 0", n)
	}
}

// TestStoodStillInQueueKeepsConnection: the process stood still 300 ms
// while a command waited in its queue, past its deadline and Follow on the
// wall clock, but not once the stand-still is taken off. It is written,
// and its reply (20 ms late) read, on its connection. The batch's I/O
// deadline was its commands' deadline plus Follow, not moved by the
// stand-still before the batch began, so it had passed before the write
// and the connection was closed (the chaos suite's stalls found it).
func TestStoodStillInQueueKeepsConnection(t *testing.T) {
	var s starver
	m, p := slowPool(t, &s, 20*time.Millisecond)
	m.Set("k", "v")
	rp := p.(*redisPool)
	stall.Hold()
	defer stall.Done()
	box := newInbox(1)
	op := node.New(node.Op{Kind: node.Get, Key: "k", Follow: 50 * time.Millisecond})
	// Sent 400 ms ago with a 100 ms deadline; the process stood still
	// 300 ms of that.
	req := request{op: op, deadline: time.Now().Add(-300 * time.Millisecond), mark: stall.Now() - 350*time.Millisecond, rcv: box}
	w := writer{p: rp, pipe: rp.c.Pipeline(), ctx: deadlineCtx{cs: rp.cs}}
	w.run([]request{req})
	if r := box.wait(t)[0]; r.Err != nil || r.Str != "v" {
		t.Fatalf("GET that waited out a stand-still in its queue: %+v, want \"v\"", r)
	}
	if n := s.closed.Load(); n != 0 {
		t.Fatalf("%d connections closed; want 0", n)
	}
}

// slowPool is starvedPool behind a slowProxy that delays every reply by
// d, with its first connection set up (warm).
func slowPool(t *testing.T, s *starver, d time.Duration) (*miniredis.Miniredis, Pool) {
	t.Helper()
	m := miniredis.RunT(t)
	p, err := Dial(&redis.Options{Addr: slowProxy(t, m.Addr(), d), Dialer: s.dial, DialTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	warm(t, p)
	return m, p
}

// slowProxy forwards connections to addr, each reply d late.
func slowProxy(t *testing.T, addr string, d time.Duration) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", addr)
			if err != nil {
				_ = c.Close()
				return
			}
			go func() { _, _ = io.Copy(up, c); _ = up.Close() }()
			go func() {
				defer c.Close()
				b := make([]byte, 64<<10)
				for {
					n, err := up.Read(b)
					if err != nil {
						return
					}
					time.Sleep(d)
					if _, err := c.Write(b[:n]); err != nil {
						return
					}
				}
			}()
		}
	}()
	return l.Addr().String()
}

// TestStarvedWriterKeepsConnection: the process stands still for 500 ms
// just before a batch is written, past its deadline and Follow. The batch
// is written when the process runs again, and its reply is waited for as
// long as it would have been had it been written on time: read, and no
// connection closed (go-redis' write failed on the deadline, and it closed
// the connection).
func TestStarvedWriterKeepsConnection(t *testing.T) {
	var s starver
	m, p := starvedPool(t, &s)
	m.Set("k", "v")
	warm(t, p)
	s.write.Store(int64(500 * time.Millisecond))
	if r := send(t, p, "k"); r.Err != nil || r.Str != "v" {
		t.Fatalf("GET written after a 500 ms stand-still: %+v, want \"v\"", r)
	}
	if n := s.closed.Load(); n != 0 {
		t.Fatalf("%d connections closed; want 0", n)
	}
}

// TestSetupHasItsOwnBudget: a new connection's set-up (HELLO, the guard's
// INFO) runs under the deadline of the command that needed it, here 50 ms
// plus 100 ms of Follow; its first reply takes 500 ms. The set-up has the
// dial timeout's budget (DefaultDialTimeout), not the command's: the
// connection is kept and serves the command. It was closed when the
// command's deadline passed, and the next command dialled again.
func TestSetupHasItsOwnBudget(t *testing.T) {
	var s starver
	m := miniredis.RunT(t)
	m.Set("k", "v")
	p, err := Dial(&redis.Options{Addr: m.Addr(), Dialer: s.dial})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	s.read.Store(int64(500 * time.Millisecond)) // HELLO's reply
	if r := send(t, p, "k"); r.Err != nil || r.Str != "v" {
		t.Fatalf("GET on a connection whose set-up took 500 ms: %+v, want \"v\"", r)
	}
	if n := s.closed.Load(); n != 0 {
		t.Fatalf("%d connections closed; want 0", n)
	}
}

// TestSilentServerStillTimesOut: a server that accepts and never answers
// still ends a batch at its deadline plus Follow (here its connection's
// set-up budget, 100 ms) when the process runs all along, and every
// connection to it is closed, counted (Stats, as timed out) and logged.
func TestSilentServerStillTimesOut(t *testing.T) {
	addr := fakeServer(t, func(c net.Conn) {}) // read nothing, answer nothing
	var log bytes.Buffer
	p, err := Dial(&redis.Options{Addr: addr, DialTimeout: 100 * time.Millisecond},
		WithLogger(slog.New(slog.NewTextHandler(&log, nil))), WithRestartGuard(0), WithEvictionCheck(EvictionIgnore))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	start := time.Now()
	r := send(t, p, "k")
	if took := time.Since(start); r.Err == nil || took > 5*time.Second {
		t.Fatalf("GET on a silent server: %+v after %v; want an error at about 150 ms", r, took)
	}
	p.(*redisPool).w.wg.Wait() // none: the server never answered
	_, ok := Stats(p)
	p.Close() // Pool.Close's own closes are not counted
	if st, _ := Stats(p); st.Dials != 1 || st.Closed != st.Dials || st.TimedOut != st.Closed || !ok {
		t.Fatalf("Stats: %+v, %v; want one connection dialled (none set up ahead for a server that never answered), closed after its deadline passed", st, ok)
	}
	if !strings.Contains(log.String(), "closed a connection") || !strings.Contains(log.String(), "timeout") {
		t.Fatalf("log: %q; want the close, with its read's timeout", log.String())
	}
}

// TestBrokenConnectionIsNotTimedOut: a connection the server drops is
// counted as closed, but not as timed out.
func TestBrokenConnectionIsNotTimedOut(t *testing.T) {
	addr := fakeServer(t, func(c net.Conn) {
		_, _ = c.Read(make([]byte, 64)) // the first command, then hang up
		_ = c.Close()
	})
	p, err := Dial(&redis.Options{Addr: addr, Protocol: 2, DisableIdentity: true},
		WithLogger(slog.New(slog.DiscardHandler)), WithRestartGuard(0), WithEvictionCheck(EvictionIgnore))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if r := send(t, p, "k"); r.Err == nil {
		t.Fatalf("GET on a server that hangs up: %+v; want an error", r)
	}
	if st, _ := Stats(p); st.Closed < 1 || st.TimedOut != 0 {
		t.Fatalf("Stats: %+v; want the connection closed, none timed out", st)
	}
	if err := p.Close(); err != nil { // the failed connection is closed already: no error for it
		t.Fatalf("Close after a connection failed: %v; want nil", err)
	}
}

// fakeServer accepts connections on a local port until the test ends and
// gives each to serve; the connections are closed when the test ends.
func fakeServer(t *testing.T, serve func(net.Conn)) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		_ = l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go serve(c)
		}
	}()
	return l.Addr().String()
}

// TestCloseAfterSocketClosedUnderneath: a connection whose socket was
// closed from below (a proxy's or a dialer's wrapper that cut it) and not
// used since does not make Close fail: closing what is closed already is
// no error. Close returned "use of closed network connection" for it.
func TestCloseAfterSocketClosedUnderneath(t *testing.T) {
	m := miniredis.RunT(t)
	var mu sync.Mutex
	var raw []net.Conn
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		if err == nil {
			mu.Lock()
			raw = append(raw, c)
			mu.Unlock()
		}
		return c, err
	}
	p, err := Dial(&redis.Options{Addr: m.Addr(), Dialer: dial}, WithRestartGuard(0))
	if err != nil {
		t.Fatal(err)
	}
	if r := send(t, p, "k"); r.Err != nil && r.Err != redis.Nil {
		t.Fatalf("GET: %+v", r)
	}
	mu.Lock()
	for _, c := range raw {
		_ = c.Close()
	}
	mu.Unlock()
	if err := p.Close(); err != nil {
		t.Fatalf("Close with a socket closed underneath: %v; want nil", err)
	}
}

// TestOnePoolForBatches: a Pool from Dial keeps go-redis from opening a
// second pool for pipelines (v9.23 makes one by default, with 128 KiB
// buffers): a batch of one command and a batch of several would then run
// on different connections, and when a starved process' batches grow from
// one command to several, each Pool dialled new connections for them at
// the worst moment (the overload harness: 9-10 dials at the onset of
// starvation, against none for redsync). A caller who sizes the pipeline
// pool or its buffers keeps it.
func TestOnePoolForBatches(t *testing.T) {
	for _, c := range []struct {
		name string
		in   redis.Options
		want int
	}{
		{"default", redis.Options{Addr: "127.0.0.1:1"}, -1},
		{"sized", redis.Options{Addr: "127.0.0.1:1", PipelinePoolSize: 4}, 4},
		{"buffers", redis.Options{Addr: "127.0.0.1:1", PipelineReadBufferSize: 1 << 16}, 0},
	} {
		p, err := Dial(&c.in)
		if err != nil {
			t.Fatal(err)
		}
		got := p.(*redisPool).c.(*redis.Client).Options().PipelinePoolSize
		_ = p.Close()
		if got != c.want {
			t.Errorf("%s: the client's PipelinePoolSize is %d, want %d", c.name, got, c.want)
		}
	}
}

// TestDeadIdleConnectionsSkipped: the server side closed every connection
// (a restart, a proxy's) while they sat idle; the next commands go out on
// new ones. go-redis checks an idle connection before it reuses it,
// through syscall.Conn; the Pool's connection wrapper hid it, so each dead
// connection failed one command (with 4 connections set up ahead, the
// re-sends of a release owed after a late yes met four of them in turn,
// 1.5 s of back-off, TestLateYesReleaseNotDropped).
func TestDeadIdleConnectionsSkipped(t *testing.T) {
	m := miniredis.RunT(t)
	m.Set("k", "v")
	var mu sync.Mutex
	var served []net.Conn
	addr := fakeServer(t, func(c net.Conn) {
		up, err := net.Dial("tcp", m.Addr())
		if err != nil {
			_ = c.Close()
			return
		}
		mu.Lock()
		served = append(served, c, up)
		mu.Unlock()
		go func() { _, _ = io.Copy(up, c); _ = up.Close() }()
		_, _ = io.Copy(c, up)
		_ = c.Close()
	})
	p, err := Dial(&redis.Options{Addr: addr}, WithRestartGuard(0))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	warm(t, p)
	mu.Lock()
	for _, c := range served {
		_ = c.Close()
	}
	mu.Unlock()
	time.Sleep(50 * time.Millisecond) // the FINs reach the client
	for range 2 * maxExecutors {
		if r := send(t, p, "k"); r.Err != nil || r.Str != "v" {
			t.Fatalf("GET after the server side closed the idle connections: %+v, want \"v\"", r)
		}
	}
}

// TestWarmUpAfterASecond: a Pool whose server has answered for warmAfter
// sets up the connections its queues can use at once, ahead of need; one
// that has not answered that long has only the connection it used.
func TestWarmUpAfterASecond(t *testing.T) {
	var s starver
	m := miniredis.RunT(t)
	p, err := Dial(&redis.Options{Addr: m.Addr(), Dialer: s.dial}, WithRestartGuard(0))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	warm(t, p)
	if n := s.dials.Load(); n != 1 {
		t.Fatalf("%d dials before warmAfter; want 1", n)
	}
	time.Sleep(warmAfter)
	warm(t, p)
	// The set-up runs on a goroutine of its own, after the answer.
	for end := time.Now().Add(5 * time.Second); s.dials.Load() < 2*maxExecutors && time.Now().Before(end); {
		time.Sleep(time.Millisecond)
	}
	if n := s.dials.Load(); n < 2*maxExecutors {
		t.Fatalf("%d dials after warmAfter; want the %d connections the queues can use", n, 2*maxExecutors)
	}
}

// TestWarmNow: Warm sets up the connections the queues can use at once
// without waiting for warmAfter, and returns once they are set up; a
// second Warm sets up no more, and a closed Pool's, or a Pool from New's,
// returns at once.
func TestWarmNow(t *testing.T) {
	var s starver
	m := miniredis.RunT(t)
	m.Set("k", "v")
	p, err := Dial(&redis.Options{Addr: m.Addr(), Dialer: s.dial}, WithRestartGuard(0))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := Warm(ctx, p); err != nil {
		t.Fatal(err)
	}
	if n := s.dials.Load(); n != 2*maxExecutors {
		t.Fatalf("%d dials when Warm returned; want the %d connections the queues can use", n, 2*maxExecutors)
	}
	if err := Warm(ctx, p); err != nil || s.dials.Load() != 2*maxExecutors {
		t.Fatalf("a second Warm: %v, %d dials in all; want nil and no more", err, s.dials.Load())
	}
	for range 2 * maxExecutors { // the warm connections serve commands
		if r := send(t, p, "k"); r.Err != nil || r.Str != "v" {
			t.Fatalf("GET on a warm Pool: %+v", r)
		}
	}
	if n := s.dials.Load(); n != 2*maxExecutors {
		t.Fatalf("%d dials after commands on a warm Pool; want %d", n, 2*maxExecutors)
	}
	_ = p.Close()
	closed, err := Dial(&redis.Options{Addr: m.Addr()}, WithRestartGuard(0))
	if err != nil {
		t.Fatal(err)
	}
	_ = closed.Close()
	done, cancel := context.WithCancel(ctx)
	cancel() // Warm of a closed Pool returns nil at once, ended context or not
	if err := Warm(done, closed); err != nil {
		t.Fatalf("Warm of a closed Pool: %v; want nil", err)
	}
	rc := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rc.Close()
	fromNew, err := New(rc)
	if err != nil {
		t.Fatal(err)
	}
	if err := Warm(done, fromNew); err != nil {
		t.Fatalf("Warm of a Pool from New: %v; want nil", err)
	}
}

// TestWarmAgainAfterNothingSetUp: a warm-up while the server is down sets
// up nothing; it is not spent: the next Warm, once the server is back,
// sets up the connections.
func TestWarmAgainAfterNothingSetUp(t *testing.T) {
	s, p := warmedWhileDown(t)
	before := s.dials.Load()
	if err := Warm(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	if n := s.dials.Load() - before; n < 2*maxExecutors {
		t.Fatalf("%d dials by the Warm after the server came back; want the %d connections the queues can use", n, 2*maxExecutors)
	}
}

// warmedWhileDown returns a Pool, whose dials s counts, that was warmed up
// while its server was down (a warm-up that set up nothing), and the server
// back up.
func warmedWhileDown(t *testing.T) (*starver, Pool) {
	t.Helper()
	s := &starver{}
	m := miniredis.RunT(t)
	p, err := Dial(&redis.Options{Addr: m.Addr(), Dialer: s.dial, DialerRetries: 1}, WithRestartGuard(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	m.Close()
	if err := Warm(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	if err := m.Restart(); err != nil {
		t.Fatal(err)
	}
	return s, p
}

// TestAutoWarmUpAfterNothingSetUp: the Pool's own warm-up, too, is not
// spent by one that set up nothing: once the server has answered again for
// warmAfter, it sets up the connections.
func TestAutoWarmUpAfterNothingSetUp(t *testing.T) {
	s, p := warmedWhileDown(t)
	warm(t, p)
	time.Sleep(warmAfter)
	before := s.dials.Load()
	warm(t, p) // answered warmAfter after the first answer: the warm-up starts
	for end := time.Now().Add(5 * time.Second); s.dials.Load()-before < 2*maxExecutors-1 && time.Now().Before(end); {
		time.Sleep(time.Millisecond)
	}
	if n := s.dials.Load() - before; n < 2*maxExecutors-1 {
		t.Fatalf("%d dials after warmAfter of answers; want the %d more the queues can use", n, 2*maxExecutors-1)
	}
}

// TestWarmUpCountsErrorReplies: a server that answers PING with an error
// (an ACL without +ping) has its connections set up all the same: the
// warm-up is done, not tried again every second.
func TestWarmUpCountsErrorReplies(t *testing.T) {
	m := miniredis.RunT(t)
	p, err := Dial(&redis.Options{Addr: m.Addr()}, WithRestartGuard(0))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	m.SetError("NOPERM this user has no permissions to run the 'ping' command")
	if err := Warm(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	rp := p.(*redisPool)
	rp.w.mu.Lock()
	spent := rp.w.done != nil
	rp.w.mu.Unlock()
	if !spent || !rp.w.begun.Load() {
		t.Fatal("a warm-up answered with error replies is to be tried again; want it done")
	}
}
