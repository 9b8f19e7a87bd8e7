package redisproc

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/internal/golog"
)

const (
	// ReadyTimeout bounds the wait for a server to answer PING after a
	// (re)start.
	ReadyTimeout = 30 * time.Second
	// StopTimeout bounds a clean shutdown before SIGKILL.
	StopTimeout = 10 * time.Second
)

// Args returns the redis-server arguments every test server runs with
// (append only file fsynced on every write, so an acknowledged write
// survives a kill), then requirepass if password is set, then extra.
func Args(password string, extra []string) []string {
	args := []string{
		"--save", "",
		"--appendonly", "yes",
		"--appendfsync", "always",
		"--daemonize", "no",
	}
	if password != "" {
		args = append(args, "--requirepass", password)
	}
	return append(args, extra...)
}

// Process is what WaitReady asks about a server it waits for.
type Process interface {
	// Exited returns a non-nil error once the server is known to have
	// exited.
	Exited() error
	// LogTail returns the end of the server's log.
	LogTail() string
}

// WaitReady polls PING at addr until it succeeds, p exits or ReadyTimeout
// passes; the error then includes the end of p's log.
func WaitReady(p Process, addr, password string) error {
	deadline := time.Now().Add(ReadyTimeout)
	var lastErr error
	for attempt := 0; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		lastErr = Ping(ctx, addr, password)
		cancel()
		if lastErr == nil {
			return nil
		}
		// Asking whether the server died may cost a Docker API call, so
		// do it every few attempts only.
		if attempt%5 == 4 {
			if err := p.Exited(); err != nil {
				return fmt.Errorf("server exited before answering PING: %v\n--- log tail ---\n%s", err, p.LogTail())
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no PING answer within %v (last error: %v)\n--- log tail ---\n%s",
				ReadyTimeout, lastErr, p.LogTail())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Ping sends AUTH (if password != "") and PING over a fresh connection and
// expects +PONG. "-LOADING" and other errors count as not ready.
func Ping(ctx context.Context, addr, password string) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	r := bufio.NewReader(conn)
	roundTrip := func(want string, args ...string) error {
		var b strings.Builder
		fmt.Fprintf(&b, "*%d\r\n", len(args))
		for _, a := range args {
			fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
		}
		if _, err := conn.Write([]byte(b.String())); err != nil {
			return err
		}
		line, err := r.ReadString('\n')
		if err != nil {
			return err
		}
		if line = strings.TrimRight(line, "\r\n"); line != want {
			return fmt.Errorf("%s: got %q", args[0], line)
		}
		return nil
	}
	if password != "" {
		if err := roundTrip("+OK", "AUTH", password); err != nil {
			return err
		}
	}
	return roundTrip("+PONG", "PING")
}

// NewClient returns a go-redis client for addr with password (may be
// empty), ContextTimeoutEnabled set and no retries: MaxRetries -1, and
// DialerRetries 1 so that a command to a stopped server fails at once with
// "connection refused" instead of after go-redis's default five dial
// attempts; go-redis does not log its failed dials (internal/golog). The
// caller closes it. It does not contact the server.
func NewClient(addr, password string) *redis.Client {
	opt := &redis.Options{
		Addr:                  addr,
		Password:              password,
		ContextTimeoutEnabled: true,
		MaxRetries:            -1,
		DialerRetries:         1,
	}
	opt.Dialer = golog.Dialer(redis.NewDialer(opt)) // a node the test killed is no news to log
	return redis.NewClient(opt)
}
