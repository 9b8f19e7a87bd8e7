package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redlock"
)

// envAddrs names the environment variable that lists the nodes when --addrs
// is not given.
const envAddrs = "QUORUMLOCK_ADDRS"

// node is one Redis master named on the command line or in QUORUMLOCK_ADDRS.
type node struct {
	name  string         // host:port (or the socket path): never the password
	opt   *redis.Options // as parsed; pool.Dial adjusts its copy
	plain bool           // a redis:// URL: TLS off, said so
}

// nodeFlags are the flags shared by the commands that talk to the nodes.
type nodeFlags struct {
	addrs        string
	passwordFile string
	tlsCA        string // files of the TLS flags
	tlsCert      string
	tlsKey       string
	prefix       string
	nodeTimeout  time.Duration
	restartGuard time.Duration // registerGuard: the strict restart guard
}

// registerGuard adds --restart-guard, for the commands that take locks.
func (f *nodeFlags) registerGuard(fs *flag.FlagSet) {
	fs.DurationVar(&f.restartGuard, "restart-guard", pool.DefaultRestartGuard, "a master up for less than this does not vote: one restarted without its data has forgotten\n"+
		"the locks it held, and each run of quorumlock meets the masters for the first time (0: off;\nkeep it above the longest --ttl of any holder)")
}

// poolOptions are the Pool options of the restart guard: strict, so that
// it applies to the masters this process meets for the first time, which
// is every master.
func (f *nodeFlags) poolOptions() ([]pool.Option, error) {
	switch {
	case f.restartGuard < 0:
		return nil, fmt.Errorf("--restart-guard %v is negative: use 0 to turn the guard off", f.restartGuard)
	case f.restartGuard == 0:
		return []pool.Option{pool.WithRestartGuard(0)}, nil
	}
	return []pool.Option{pool.WithRestartGuard(f.restartGuard), pool.WithStrictRestartGuard()}, nil
}

func (f *nodeFlags) register(fs *flag.FlagSet, timeout time.Duration, timeoutUsage string) {
	fs.StringVar(&f.addrs, "addrs", "", "the Redis masters, comma separated: host:port, redis://[user:password@]host:port[/db] or rediss://... for TLS\n(default: $"+envAddrs+")")
	fs.DurationVar(&f.nodeTimeout, "node-timeout", timeout, timeoutUsage)
	fs.StringVar(&f.tlsCA, "tls-ca", "", "verify the nodes' TLS certificates with the CA certificates in this PEM file (not the system's);\nany TLS flag turns TLS on for host:port entries")
	fs.StringVar(&f.tlsCert, "tls-cert", "", "present the client certificate in this PEM file to the nodes (with --tls-key)")
	fs.StringVar(&f.tlsKey, "tls-key", "", "the private key of --tls-cert, in a PEM file")
	fs.StringVar(&f.prefix, "prefix", redlock.DefaultKeyPrefix, "the prefix of the lock's Redis keys (the library's WithKeyPrefix): the same for every holder of KEY")
	fs.StringVar(&f.passwordFile, "password-file", "", "read the Redis password from the first line of this file, for the nodes whose address names none:\n"+
		"it stays out of "+envAddrs+" and the command line")
}

// nodes returns the nodes named by --addrs, or else by QUORUMLOCK_ADDRS.
func (f *nodeFlags) nodes(getenv func(string) string) ([]node, error) {
	list, from := f.addrs, "--addrs"
	if list == "" {
		list, from = getenv(envAddrs), envAddrs
	}
	if strings.TrimSpace(list) == "" {
		return nil, fmt.Errorf("no Redis nodes: pass --addrs host1:6379,host2:6379,... or set %s (5 independent masters are recommended)", envAddrs)
	}
	nodes, err := parseAddrs(list, from)
	if err == nil {
		err = f.applyTLS(nodes)
	}
	if err != nil || f.passwordFile == "" {
		return nodes, err
	}
	b, err := os.ReadFile(f.passwordFile)
	if err != nil {
		return nil, fmt.Errorf("--password-file: %w", err)
	}
	password, _, _ := strings.Cut(string(b), "\n")
	password = strings.TrimSuffix(password, "\r")
	if password == "" {
		return nil, fmt.Errorf("--password-file %s: the first line is empty", f.passwordFile)
	}
	for _, n := range nodes {
		if n.opt.Password == "" {
			n.opt.Password = password
		}
	}
	return nodes, nil
}

// withoutPasswords is a list of nodes as in QUORUMLOCK_ADDRS with the
// passwords taken out of its URLs (scheme://user:secret@host becomes
// scheme://user@host), for the environment of exec's command.
func withoutPasswords(list string) string {
	entries := strings.Split(list, ",")
	for i, entry := range entries {
		scheme, rest, ok := strings.Cut(entry, "://")
		at := strings.LastIndex(rest, "@")
		if !ok || at < 0 {
			continue
		}
		user, _, _ := strings.Cut(rest[:at], ":")
		if user != "" {
			user += "@"
		}
		entries[i] = scheme + "://" + user + rest[at+1:]
	}
	return strings.Join(entries, ",")
}

// parseAddrs parses a comma-separated list of nodes: plain host:port, or
// redis://, rediss:// (TLS) and unix:// URLs as go-redis' ParseURL reads
// them, with user, password and database. from names where the list came
// from, for errors. Errors never show a password.
func parseAddrs(list, from string) ([]node, error) {
	var nodes []node
	seen := map[string]int{}
	for i, entry := range strings.Split(list, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		n, err := parseAddr(entry)
		if err != nil {
			return nil, fmt.Errorf("%s entry %d (%s): %w", from, i+1, redact(entry), err)
		}
		if j, dup := seen[n.name]; dup {
			return nil, fmt.Errorf("%s entries %d and %d both name %s: list each Redis master once", from, j, i+1, n.name)
		}
		seen[n.name] = i + 1
		nodes = append(nodes, n)
	}
	if len(nodes) == 0 {
		return nil, fmt.Errorf("%s lists no Redis nodes: give host:port or redis:// URLs, comma separated", from)
	}
	return nodes, nil
}

func parseAddr(entry string) (node, error) {
	if strings.Contains(entry, "://") {
		opt, err := redis.ParseURL(entry)
		if err != nil {
			// url.Parse quotes the whole URL, password included.
			return node{}, errors.New(strings.ReplaceAll(err.Error(), entry, redact(entry)) +
				": use redis://[user:password@]host:port[/db], rediss://... for TLS, or unix:///path/to/socket")
		}
		return node{name: opt.Addr, opt: opt, plain: plainURL(entry)}, nil
	}
	host, port, err := net.SplitHostPort(entry)
	if err != nil {
		return node{}, fmt.Errorf("not host:port (%v): write it as host:6379, or as a redis:// URL", err)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return node{}, fmt.Errorf("port %q is not a number from 1 to 65535", port)
	}
	if host == "" {
		return node{}, errors.New("the host is empty: write it as host:port, e.g. 127.0.0.1:6379")
	}
	return node{name: entry, opt: &redis.Options{Addr: entry}}, nil
}

// redact hides the user information of a URL: scheme://user:secret@host
// becomes scheme://xxxxx@host. Entries without "://" or "@" are returned as
// they are.
func redact(entry string) string {
	scheme, rest, ok := strings.Cut(entry, "://")
	if !ok {
		return entry
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return entry
	}
	return scheme + "://xxxxx" + rest[at:]
}

// dial returns a pool per node, named by its address, with opts. The
// caller closes them with closePools.
func dial(nodes []node, opts ...pool.Option) ([]pool.Pool, error) {
	pools := make([]pool.Pool, 0, len(nodes))
	for _, n := range nodes {
		p, err := pool.Dial(n.opt, append([]pool.Option{pool.WithName(n.name)}, opts...)...)
		if err != nil {
			closePools(pools)
			return nil, fmt.Errorf("node %s: %w", n.name, err)
		}
		pools = append(pools, p)
	}
	return pools, nil
}

func closePools(pools []pool.Pool) {
	for _, p := range pools {
		_ = p.Close()
	}
}
