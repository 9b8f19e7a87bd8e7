package main

import (
	"flag"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redlock"
)

// lockFlags are the flags of the commands that take or act on a lock
// (exec, hold, release), and the Client they make.
type lockFlags struct {
	nf       nodeFlags
	ttl      time.Duration
	wait     time.Duration // forever: until a signal
	conflict int           // the exit status when another holder kept the lock
	fencing  bool
	metadata string
}

// forever is --wait forever.
const forever = time.Duration(-1)

// waitValue is --wait: a duration, or forever.
type waitValue struct{ d *time.Duration }

func (w waitValue) String() string {
	switch {
	case w.d == nil:
		return "0s"
	case *w.d == forever:
		return "forever"
	}
	return w.d.String()
}

func (w waitValue) Set(s string) error {
	if s == "forever" {
		*w.d = forever
		return nil
	}
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		return fmt.Errorf("not a duration (like 30s or 5m) or forever")
	case d < 0:
		return fmt.Errorf("%v is negative: use 0 for one attempt, a duration, or forever", d)
	}
	*w.d = d
	return nil
}

// register adds the node flags and --ttl; what says what the TTL is
// renewed during.
func (f *lockFlags) register(fs *flag.FlagSet, what string) {
	f.conflict = exitNotAcquired // registerAcquire makes it a flag
	f.nf.registerGuard(fs)
	f.nf.register(fs, execNodeTimeout, "how long each node may take to answer one lock operation; a new process dials every node first,\nso this is higher than the library's default (50ms)")
	fs.DurationVar(&f.ttl, "ttl", redlock.DefaultTTL, "the lock's time to live on the nodes; it is renewed every ttl/3 "+what+",\nand a holder that dies leaves the lock free within it")
}

// registerAcquire adds the flags of an acquisition: --wait, --fencing,
// --metadata.
func (f *lockFlags) registerAcquire(fs *flag.FlagSet) {
	fs.Var(waitValue{&f.wait}, "wait", "how long to wait for the lock while another holder has it: 0 (one attempt), a duration,\nor forever (until a signal)")
	fs.IntVar(&f.conflict, "conflict-exit", exitNotAcquired, "the exit status when another holder kept the lock (like flock -E), 1 to 255")
	fs.BoolVar(&f.fencing, "fencing", true, "take a fencing token (QUORUMLOCK_FENCE): one more round trip per acquisition; use the same setting\n"+
		"for every holder of KEY. It is on by default here, unlike the library (off there): a command\n"+
		"cannot know in advance whether what it changes will check the token, and the round trip is small beside starting it")
	fs.StringVar(&f.metadata, "metadata", "", "a description of this holder (host, job...) that status shows, at most 256 bytes;\nit travels in the token, after the byte 0x1d")
}

// client checks the flags, dials the nodes and returns a Client over them
// (its warnings go to stderr, prefixed "quorumlock name: "), the number of
// nodes, and a function that closes the Client and the pools. The error is
// a usage error.
func (f *lockFlags) client(e *env, name string, opts ...redlock.Option) (*redlock.Client, int, func(), error) {
	if f.conflict < 1 || f.conflict > 255 {
		return nil, 0, nil, fmt.Errorf("--conflict-exit %d: an exit status from 1 to 255", f.conflict)
	}
	nodes, err := f.nf.nodes(e.getenv)
	if err != nil {
		return nil, 0, nil, err
	}
	guard, err := f.nf.poolOptions()
	if err != nil {
		return nil, 0, nil, err
	}
	redis.SetLogger(quiet{}) // go-redis would log every failed dial into stderr
	logger := slog.New(newLineHandler(e.stderr, "quorumlock "+name+": ", &e.guards))
	pools, err := dial(nodes, append(guard, pool.WithLogger(logger))...) // restarts noticed, eviction policies
	if err != nil {
		return nil, 0, nil, err
	}
	client, err := redlock.New(pools, append([]redlock.Option{
		redlock.WithKeyPrefix(f.nf.prefix),
		redlock.WithTTL(f.ttl),
		redlock.WithNodeTimeout(f.nf.nodeTimeout),
		redlock.WithFencing(f.fencing),
		redlock.WithMetadata(f.metadata),
		redlock.WithLogger(logger)}, opts...)...)
	if err != nil {
		closePools(pools)
		return nil, 0, nil, flagNames(err)
	}
	return client, len(nodes), func() { closeSoon(client, pools, 2*f.nf.nodeTimeout) }, nil
}

// closeSoon closes client and pools, waiting at most bound for the
// Client's clean-up of nodes that have not answered (a paused or dead node
// would hold the process for the library's clean-up bound, seconds): then
// it closes the pools, which ends that clean-up at once. Its commands may
// still run on those nodes later, and their keys expire with their TTL
// there; the lock itself was released on a quorum (or expires with its
// TTL everywhere).
func closeSoon(client *redlock.Client, pools []pool.Pool, bound time.Duration) {
	closed := make(chan struct{})
	go func() {
		_ = client.Close()
		close(closed)
	}()
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case <-closed:
		closePools(pools)
	case <-t.C:
		closePools(pools)
		<-closed
	}
}
