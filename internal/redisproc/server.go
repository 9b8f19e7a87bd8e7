package redisproc

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

const tempDirPrefix = "quorumlock-redis-"

// EnvServer names the server binary every test server runs: a name looked
// up in PATH or a path, e.g. "valkey-server". Unset or empty means
// "redis-server". The test kit's locally built image copies that binary, so
// its content-derived tag differs per server.
const EnvServer = "QUORUMLOCK_SERVER"

const defaultServer = "redis-server"

// ServerName returns $QUORUMLOCK_SERVER, or "redis-server" if it is unset or
// empty.
func ServerName() string {
	if s := strings.TrimSpace(os.Getenv(EnvServer)); s != "" {
		return s
	}
	return defaultServer
}

// FindBinary returns the path of the server binary (ServerName) or an error
// saying it is missing.
func FindBinary() (string, error) {
	name := ServerName()
	p, err := exec.LookPath(name)
	if err != nil {
		if name != defaultServer {
			return "", fmt.Errorf("%s (chosen by %s) not found: %v", name, EnvServer, err)
		}
		return "", fmt.Errorf("%s not found in PATH: %v", name, err)
	}
	return p, nil
}

// InstallHint says how to get the server binary FindBinary looks for.
func InstallHint() string {
	if name := ServerName(); name != defaultServer {
		return fmt.Sprintf("install %s, or unset %s to run redis-server", name, EnvServer)
	}
	return "apt-get install " + defaultServer
}

// TempDir creates a new temporary directory for the servers of one test,
// named so that a later test binary removes it if this one dies without
// cleaning up. The caller removes it.
func TempDir() (string, error) {
	removeStaleTempDirs()
	return os.MkdirTemp("", fmt.Sprintf("%s%d-%s-", tempDirPrefix, os.Getpid(), ProcessStartTime(os.Getpid())))
}

// New returns a server that runs bin on 127.0.0.1:port with args, keeping
// its data and log under dir (created if missing). It starts nothing:
// Launch does.
func New(bin, dir string, port int, args []string) (*Server, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return &Server{bin: bin, dir: dir, port: port, args: args}, nil
}

var staleDirsOnce sync.Once

// removeStaleTempDirs removes temporary directories left by earlier test
// binaries that died without cleaning up (their pid is gone, or now belongs
// to another process). It runs once per process and ignores errors.
func removeStaleTempDirs() {
	staleDirsOnce.Do(func() {
		matches, _ := filepath.Glob(filepath.Join(os.TempDir(), tempDirPrefix+"*"))
		for _, m := range matches {
			// quorumlock-redis-<pid>-<start>-<random>
			f := strings.SplitN(strings.TrimPrefix(filepath.Base(m), tempDirPrefix), "-", 3)
			if len(f) != 3 {
				continue
			}
			pid, err := strconv.Atoi(f[0])
			if err != nil || pid == os.Getpid() {
				continue
			}
			if !ProcessAlive(pid, f[1]) {
				_ = os.RemoveAll(m)
			}
		}
	})
}

// Server is one redis-server process slot: a new process is started by
// each Launch; its directory (data and log) persists across launches. Its
// methods are not safe for concurrent use (callers serialize them).
type Server struct {
	bin  string
	dir  string
	port int
	args []string

	cur *proc // last launched process, nil before the first launch
}

type proc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the process is reaped
	err  error         // Wait's result, valid after done is closed
}

// Addr returns the server's "127.0.0.1:PORT" address.
func (p *Server) Addr() string { return Addr(p.port) }

func (p *Server) dataDir() string { return filepath.Join(p.dir, "data") }
func (p *Server) logPath() string { return filepath.Join(p.dir, "redis.log") }

// Launch starts a new process, with an empty dataset if amnesia is set; it
// does not wait for readiness (WaitReady does). It fails if the last
// process still runs.
func (p *Server) Launch(amnesia bool) error {
	if p.cur != nil && p.Exited() == nil {
		return errors.New("server is still running")
	}
	if amnesia {
		if err := os.RemoveAll(p.dataDir()); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(p.dataDir(), 0o755); err != nil {
		return err
	}
	logf, err := os.OpenFile(p.logPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(logf, "=== redisproc: launch at %s (amnesia=%v)\n", time.Now().Format(time.RFC3339Nano), amnesia)
	args := append([]string{
		"--port", strconv.Itoa(p.port),
		"--bind", "127.0.0.1",
		"--dir", p.dataDir(),
	}, p.args...)
	cmd := exec.Command(p.bin, args...)
	cmd.Dir = p.dir
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = procAttr()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	pr := &proc{cmd: cmd, done: make(chan struct{})}
	go func() {
		pr.err = cmd.Wait() // reaps the child: no zombies
		logf.Close()
		close(pr.done)
	}()
	p.cur = pr
	return nil
}

// Exited returns a non-nil error once the last launched process is known
// to have exited (or none was launched), nil while it runs.
func (p *Server) Exited() error {
	if p.cur == nil {
		return errors.New("never started")
	}
	select {
	case <-p.cur.done:
		if p.cur.err == nil {
			return errors.New("exit status 0")
		}
		return p.cur.err
	default:
		return nil
	}
}

// signal sends sig to the current process if it has not been reaped.
func (p *Server) signal(sig syscall.Signal) error {
	if p.cur == nil || p.Exited() != nil {
		return nil
	}
	err := syscall.Kill(p.cur.cmd.Process.Pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// wait waits up to d for the current process to be reaped.
func (p *Server) wait(d time.Duration) bool {
	if p.cur == nil {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.cur.done:
		return true
	case <-t.C:
		return false
	}
}

// Kill sends SIGKILL and waits for the process to be reaped.
func (p *Server) Kill() error {
	if err := p.signal(syscall.SIGKILL); err != nil {
		return err
	}
	if !p.wait(StopTimeout) {
		return fmt.Errorf("pid %d did not exit after SIGKILL", p.cur.cmd.Process.Pid)
	}
	return nil
}

// Stop sends SIGTERM (so Redis flushes its append only file) and waits,
// killing the process after StopTimeout.
func (p *Server) Stop() error {
	if err := p.signal(syscall.SIGTERM); err != nil {
		return err
	}
	_ = p.signal(syscall.SIGCONT) // in case it is stopped
	if p.wait(StopTimeout) {
		return nil
	}
	return p.Kill()
}

// Pause stops the process with SIGSTOP and returns once it is stopped.
func (p *Server) Pause() error {
	if err := p.signal(syscall.SIGSTOP); err != nil {
		return err
	}
	return p.waitState(func(s byte) bool { return s == 'T' }, "stopped")
}

// Resume continues a paused process and returns once it runs.
func (p *Server) Resume() error {
	if err := p.signal(syscall.SIGCONT); err != nil {
		return err
	}
	return p.waitState(func(s byte) bool { return s != 'T' }, "running")
}

// waitState polls /proc until the process state satisfies ok, so Pause and
// Resume have taken effect when they return. Without /proc it returns at
// once.
func (p *Server) waitState(ok func(byte) bool, what string) error {
	if p.cur == nil {
		return nil
	}
	pid := p.cur.cmd.Process.Pid
	deadline := time.Now().Add(5 * time.Second)
	for {
		state, _, found := procStat(pid)
		if !found || ok(state) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pid %d not %s after 5s (state %c)", pid, what, state)
		}
		time.Sleep(time.Millisecond)
	}
}

// Remove kills the process and deletes the server's directory.
func (p *Server) Remove() error {
	if err := p.Kill(); err != nil {
		return err
	}
	return os.RemoveAll(p.dir)
}

// LogTail returns the last lines of the server's log, for diagnostics.
func (p *Server) LogTail() string {
	b, err := os.ReadFile(p.logPath())
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	return Tail(string(b), 20)
}

// Tail returns the last n lines of s.
func Tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
