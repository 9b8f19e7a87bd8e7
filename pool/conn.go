package pool

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/quorumlock/quorumlock/internal/golog"
	"github.com/quorumlock/quorumlock/internal/stall"
)

// Connection settings a Pool from Dial or DialFailover pins, so that it
// does not depend on go-redis' defaults, which change between versions
// (docs/design.md, "What the library takes from go-redis").
const (
	// DefaultDialTimeout bounds a connection's set-up, from the dial to
	// its last set-up reply (HELLO, AUTH, the restart guard's INFO), when
	// the options leave DialTimeout 0.
	DefaultDialTimeout = 5 * time.Second
	// DefaultIOTimeout bounds one read or write when the options leave
	// ReadTimeout or WriteTimeout 0 and the call's context sets no
	// earlier deadline.
	DefaultIOTimeout = 5 * time.Second
)

// pin sets the timeouts a Pool's client leaves 0 (go-redis' default) to
// the library's own: the dial's and a set-up's to DefaultDialTimeout, a
// read's and a write's to DefaultIOTimeout, and the wait for a connection
// from go-redis' pool to the read timeout plus a second (go-redis' own
// rule, pinned too). Negative values (no timeout) and positive ones are
// kept.
func pin(dial, read, write, wait *time.Duration) {
	for _, d := range []struct {
		t   *time.Duration
		def time.Duration
	}{{dial, DefaultDialTimeout}, {read, DefaultIOTimeout}, {write, DefaultIOTimeout}} {
		if *d.t == 0 {
			*d.t = d.def
		}
	}
	if *wait == 0 {
		*wait = max(*read, 0) + time.Second
	}
}

// onePool sets a PipelinePoolSize left 0, with no pipeline buffer size
// set, to −1: go-redis v9.23 then runs pipelines on the main pool, as
// v9.22 does unless the pipeline buffers are sized. A Pool's batches run as
// one command or as a pipeline depending on how many commands are queued;
// with two pools, a process whose batches grow when it is starved dials
// connections for the pipelines at that moment, under starvation.
func onePool(size *int, readBuf, writeBuf int) {
	if *size == 0 && readBuf == 0 && writeBuf == 0 {
		*size = -1
	}
}

// conns returns the connection counters and log of a Pool of cfg whose
// set-up budget is setup.
func (cfg *config) conns(setup time.Duration) *conns {
	return &conns{name: cfg.name, log: cfg.logger, setup: max(setup, 0)}
}

// setupEnd is when the set-up budget of the command connection dialled last
// ends; zero for a nil cs (a Pool from New).
func (cs *conns) setupEnd() time.Time {
	if cs == nil {
		return time.Time{}
	}
	return time.Unix(0, cs.lastDial.Load()).Add(cs.setup)
}

// lookFor is how long a connection waits, once its deadline has passed, to
// see whether the reply is there after all.
const lookFor = time.Millisecond

// conns counts and logs what the connections of one Pool do. Safe for
// concurrent use.
type conns struct {
	name     string
	log      *slog.Logger
	setup    time.Duration // the set-up budget (DialTimeout)
	lastDial atomic.Int64  // UnixNano of the last command connection dialled
	closing  atomic.Bool   // Close has begun: closes are no longer news

	dials, dialErrors, closed atomic.Int64
	timedOut                  atomic.Int64 // of closed, those after a deadline passed
	waited                    atomic.Int64 // reads and writes that went on past their deadline and completed

	logMu  sync.Mutex
	logged time.Time // when a close was last logged
	quiet  int       // closes not logged since
}

// closeEvery bounds how often a Pool logs that it closed a connection; the
// closes in between are counted in the next line.
const closeEvery = 10 * time.Second

// dialer wraps dial so that every connection it makes is a conn of cs.
func (cs *conns) dialer(dial func(context.Context, string, string) (net.Conn, error)) func(context.Context, string, string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		cn, err := dial(ctx, network, addr)
		if err != nil {
			cs.dialErrors.Add(1)
			return nil, golog.Mark(err) // go-redis does not log it
		}
		cs.dials.Add(1)
		c := &conn{Conn: cn, cs: cs, born: time.Now()}
		// A subscription's idle reads time out without harm, and its
		// set-up has a budget of its own (Subscribe).
		c.sub = ctx.Value(subscriptionKey{}) != nil
		if !c.sub {
			cs.lastDial.Store(c.born.UnixNano())
		}
		if sc, ok := cn.(syscall.Conn); ok {
			return sysConn{c, sc}, nil
		}
		return c, nil
	}
}

// sysConn is a conn whose socket go-redis can see (syscall.Conn): before
// it reuses an idle connection it peeks at the socket, and drops one that
// the server closed (a restart) instead of failing a command on it. Only
// for sockets that offer it, as go-redis does: a TLS connection has no
// such check.
type sysConn struct {
	*conn
	sc syscall.Conn
}

func (c sysConn) SyscallConn() (syscall.RawConn, error) { return c.sc.SyscallConn() }

// conn is a connection whose deadlines do not count the time the process
// stood still (internal/stall). go-redis closes a connection when a read
// or write on it fails, a timeout included, since a reply may still be on
// its way; so a deadline that passed only because this process could not
// run would cost a connection, and the commands on it their replies. A
// read or write that times out goes on, as long as the deadline moved
// later by what the process stood still since it was set has not passed,
// and then looks once more without waiting, so that a reply already
// received is read.
type conn struct {
	net.Conn
	cs   *conns
	born time.Time
	sub  bool // a subscription's: a read may time out and go on

	mu     sync.Mutex // guards rd and wd (Set*Deadline may race with Close's reader)
	rd, wd deadline
	err    atomic.Pointer[error] // the I/O error that closed a command connection
	shut   atomic.Bool
}

// deadline is one of go-redis' deadlines, with the stall clock when it was
// set.
type deadline struct {
	at   time.Time
	mark time.Duration
}

func (c *conn) SetDeadline(t time.Time) error {
	if err := c.SetReadDeadline(t); err != nil {
		return err
	}
	return c.SetWriteDeadline(t)
}

func (c *conn) SetReadDeadline(t time.Time) error {
	return c.Conn.SetReadDeadline(c.set(&c.rd, t))
}

func (c *conn) SetWriteDeadline(t time.Time) error {
	return c.Conn.SetWriteDeadline(c.set(&c.wd, t))
}

// set records t as d and returns it.
func (c *conn) set(d *deadline, t time.Time) time.Time {
	c.mu.Lock()
	*d = deadline{at: t, mark: stall.Now()}
	c.mu.Unlock()
	return t
}

func (c *conn) Read(b []byte) (int, error) {
	if err := c.failed(); err != nil {
		return 0, err
	}
	n, err := c.Conn.Read(b)
	if n == 0 && deadlinePassed(err) {
		n, err = c.again(err, &c.rd, c.Conn.SetReadDeadline, func() (int, error) { return c.Conn.Read(b) })
	}
	return n, c.note(err)
}

// Write goes on after a timeout only when nothing was written: a write
// cut short in the middle (a TLS record half sent) cannot be resumed.
func (c *conn) Write(b []byte) (int, error) {
	if err := c.failed(); err != nil {
		return 0, err
	}
	n, err := c.Conn.Write(b)
	if n == 0 && deadlinePassed(err) {
		n, err = c.again(err, &c.wd, c.Conn.SetWriteDeadline, func() (int, error) { return c.Conn.Write(b) })
	}
	return n, c.note(err)
}

// again repeats op, which failed with err on deadline d, until it does
// anything but time out with nothing done, or d, moved later by what the
// process stood still since d was set, has passed and one last look
// without waiting timed out too.
func (c *conn) again(err error, d *deadline, setSocket func(time.Time) error, op func() (int, error)) (int, error) {
	stall.Hold()
	defer stall.Done()
	c.mu.Lock()
	at, mark := d.at, d.mark
	c.mu.Unlock()
	looked := false
	for {
		until, now := stall.Extend(at, mark), time.Now()
		if !now.Before(until) {
			if looked {
				return 0, err
			}
			looked, until = true, now.Add(lookFor)
		}
		if e := setSocket(until); e != nil {
			return 0, err
		}
		n, e := op()
		if n > 0 || !deadlinePassed(e) {
			c.cs.waited.Add(1)
			return n, e
		}
		err = e
	}
}

// note returns err. A command connection whose read or write failed with
// err is closed at once, and err kept for the close's log line: go-redis
// never uses such a connection again (a reply may be on its way), and does
// not always close it (v9.22 leaves the socket open when a set-up command
// fails).
func (c *conn) note(err error) error {
	if err != nil && !c.sub && c.err.CompareAndSwap(nil, &err) {
		_ = c.Close()
	}
	return err
}

// failed returns the error that closed a command connection, which every
// later read and write returns too (rather than "use of closed network
// connection"), or nil.
func (c *conn) failed() error {
	if e := c.err.Load(); e != nil {
		return *e
	}
	return nil
}

// Close closes the connection, and counts and logs it unless the Pool is
// being closed. Closing a connection that is closed already is no error.
func (c *conn) Close() error {
	if c.shut.CompareAndSwap(false, true) && !c.cs.closing.Load() {
		c.cs.closed.Add(1)
		var why error
		if e := c.err.Load(); e != nil {
			why = *e
		}
		if deadlinePassed(why) {
			c.cs.timedOut.Add(1)
		}
		c.cs.logClose(time.Since(c.born), why)
	}
	if err := c.Conn.Close(); !errors.Is(err, net.ErrClosed) {
		return err
	}
	return nil // closed already: by us (note), or from below
}

// logClose logs a close, at most once per closeEvery; the ones in between
// are counted in the next line.
func (cs *conns) logClose(age time.Duration, why error) {
	cs.logMu.Lock()
	now := time.Now()
	if now.Sub(cs.logged) < closeEvery {
		cs.quiet++
		cs.logMu.Unlock()
		return
	}
	quiet := cs.quiet
	cs.logged, cs.quiet = now, 0
	cs.logMu.Unlock()
	reason := "no error: go-redis retired it (idle or too old), or the server's address changed"
	if why != nil {
		reason = why.Error()
	}
	cs.log.Warn("quorumlock: closed a connection to the Redis server; the next command dials again", "pool", cs.name,
		"after", reason, "age", age.Round(time.Millisecond), "closed_since_last_line", quiet, "closed_in_all", cs.closed.Load())
}

// deadlinePassed reports a socket's deadline passing.
func deadlinePassed(err error) bool {
	return err != nil && errors.Is(err, os.ErrDeadlineExceeded)
}

// patient returns ctx as a patientCtx, with the stall clock held until
// done is called: the wrapping of every call that goes straight to
// go-redis under its caller's deadline.
func patient(ctx context.Context) (_ context.Context, done func()) {
	stall.Hold()
	return patientCtx{ctx, stall.Now()}, stall.Done
}

// patientCtx is a caller's context whose deadline, as go-redis reads it for
// a connection's reads and writes, does not count the time the process
// stood still since the call began (conn's rule, for the deadline's
// source); its Done and Err are the caller's.
type patientCtx struct {
	context.Context
	mark time.Duration
}

func (c patientCtx) Deadline() (time.Time, bool) {
	d, ok := c.Context.Deadline()
	if !ok {
		return d, false
	}
	return stall.Extend(d, c.mark), true
}
