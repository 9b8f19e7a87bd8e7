package history

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ParseMonitorLine parses one line of a Redis MONITOR stream, as
//
//	1700000000.123456 [0 127.0.0.1:50000] "EVALSHA" "ab12..." "1" "key" "tok"
//
// with or without the leading '+' of the RESP simple string and the
// trailing CRLF. Arguments are unquoted as Redis quotes them (\\, \", \n,
// \r, \t, \a, \b and \xHH). It returns an error for a line in another
// format.
func ParseMonitorLine(line string) (Entry, error) {
	line = strings.TrimRight(strings.TrimPrefix(line, "+"), "\r\n")
	q := strings.IndexByte(line, '"')
	if q < 0 {
		return Entry{}, fmt.Errorf("monitor line %q: no command", line)
	}
	head := line[:q]
	lb, rb := strings.IndexByte(head, '['), strings.LastIndexByte(head, ']')
	if lb < 0 || rb < lb {
		return Entry{}, fmt.Errorf("monitor line %q: no [db source]", line)
	}
	_, source, ok := strings.Cut(head[lb+1:rb], " ")
	if !ok {
		return Entry{}, fmt.Errorf("monitor line %q: no source", line)
	}
	var args []string
	rest := line[q:]
	for rest != "" {
		if rest[0] == ' ' {
			rest = rest[1:]
			continue
		}
		arg, n, err := unquote(rest)
		if err != nil {
			return Entry{}, fmt.Errorf("monitor line %q: %w", line, err)
		}
		args = append(args, arg)
		rest = rest[n:]
	}
	return Entry{Source: source, Args: args}, nil
}

// unquote reads one quoted argument at the start of s and returns it and the
// number of bytes it took.
func unquote(s string) (string, int, error) {
	if s == "" || s[0] != '"' {
		return "", 0, errors.New("argument does not start with a quote")
	}
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"':
			return b.String(), i + 1, nil
		case c != '\\':
			b.WriteByte(c)
			continue
		}
		i++
		if i >= len(s) {
			break
		}
		switch s[i] {
		case '\\', '"':
			b.WriteByte(s[i])
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'a':
			b.WriteByte('\a')
		case 'b':
			b.WriteByte('\b')
		case 'x':
			if i+2 >= len(s) {
				return "", 0, errors.New("short \\x escape")
			}
			v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
			if err != nil {
				return "", 0, fmt.Errorf("bad \\x escape: %w", err)
			}
			b.WriteByte(byte(v))
			i += 2
		default:
			return "", 0, fmt.Errorf("unknown escape \\%c", s[i])
		}
	}
	return "", 0, errors.New("unterminated argument")
}

// Monitor feeds the MONITOR stream of one Redis node into an Audit until
// Stop. It connects directly to the node; when the connection fails (the
// node was killed or restarted) it reconnects every 20 ms, and tells the
// Audit about the gap (Audit.Gap) each time it is attached again, before
// any entry that follows. A line it cannot parse is counted (Errors) and
// skipped.
type Monitor struct {
	node     int
	addr, pw string
	audit    *Audit
	cancel   context.CancelFunc
	done     chan struct{}

	mu       sync.Mutex
	conn     net.Conn
	attaches int
	errs     int
	lastErr  error
}

// StartMonitor starts following node n at addr (password pw, may be empty)
// into a, on a goroutine that Stop ends and joins. It does not wait for the
// first attachment: use Attached to know.
func StartMonitor(n int, addr, pw string, a *Audit) *Monitor {
	ctx, cancel := context.WithCancel(context.Background())
	m := &Monitor{node: n, addr: addr, pw: pw, audit: a, cancel: cancel, done: make(chan struct{})}
	go m.run(ctx)
	return m
}

// Attached returns how many times the stream was attached (1 after the
// first success, more after reconnections).
func (m *Monitor) Attached() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.attaches
}

// Errors returns the number of unparsable lines and the last error seen
// (connection failures included).
func (m *Monitor) Errors() (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.errs, m.lastErr
}

// Stop ends the stream and waits for the goroutine. Calling it again does
// nothing.
func (m *Monitor) Stop() {
	m.cancel()
	m.mu.Lock()
	if m.conn != nil {
		_ = m.conn.Close()
	}
	m.mu.Unlock()
	<-m.done
}

func (m *Monitor) run(ctx context.Context) {
	defer close(m.done)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := m.follow(ctx)
		m.mu.Lock()
		m.lastErr = err
		m.mu.Unlock()
		t.Reset(20 * time.Millisecond)
	}
}

// follow attaches once and reads until the connection fails.
func (m *Monitor) follow(ctx context.Context) error {
	d := net.Dialer{Timeout: time.Second}
	conn, err := d.DialContext(ctx, "tcp", m.addr)
	if err != nil {
		return err
	}
	m.mu.Lock()
	if ctx.Err() != nil {
		m.mu.Unlock()
		conn.Close()
		return ctx.Err()
	}
	m.conn = conn
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		m.conn = nil
		m.mu.Unlock()
		conn.Close()
	}()
	r := bufio.NewReaderSize(conn, 64<<10)
	if err := m.attach(conn, r); err != nil {
		return err
	}
	// Attached: everything run from now on is in the stream; what ran
	// before is not.
	m.audit.Gap(m.node)
	m.mu.Lock()
	m.attaches++
	m.mu.Unlock()
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return err
		}
		e, perr := ParseMonitorLine(line)
		if perr != nil {
			m.mu.Lock()
			m.errs++
			m.lastErr = perr
			m.mu.Unlock()
			continue
		}
		m.audit.Observe(m.node, e)
	}
}

// attach sends AUTH (with a password) and MONITOR on conn and reads their
// +OK replies, within two seconds.
func (m *Monitor) attach(conn net.Conn, r *bufio.Reader) error {
	cmd := "MONITOR\r\n"
	replies := 1 // one +OK per command sent: AUTH's, if any, and MONITOR's
	if m.pw != "" {
		cmd = fmt.Sprintf("*2\r\n$4\r\nAUTH\r\n$%d\r\n%s\r\n", len(m.pw), m.pw) + cmd
		replies = 2
	}
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := conn.Write([]byte(cmd)); err != nil {
		return err
	}
	for range replies {
		line, err := r.ReadString('\n')
		if err != nil {
			return err
		}
		if !strings.HasPrefix(line, "+OK") {
			return fmt.Errorf("MONITOR on %s: %q", m.addr, strings.TrimSpace(line))
		}
	}
	return conn.SetDeadline(time.Time{})
}
