package redistest

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

// findRedisServer returns the path of redis-server or an error saying it is
// missing.
func findRedisServer() (string, error) {
	p, err := exec.LookPath("redis-server")
	if err != nil {
		return "", fmt.Errorf("redis-server not found in PATH: %v", err)
	}
	return p, nil
}

// startProcesses runs n redis-server processes, each in its own directory
// under one temporary directory that Cluster.cleanup removes.
func (c *Cluster) startProcesses(bin string, n int, cfg config) error {
	removeStaleTempDirs()
	c.backend = BackendProcess
	dir, err := os.MkdirTemp("", fmt.Sprintf("%s%d-%s-", tempDirPrefix, os.Getpid(), processStartTime(os.Getpid())))
	if err != nil {
		return err
	}
	c.dir = dir
	args := redisArgs(cfg)
	return c.startNodes(n, func(i, port int) (server, error) {
		nodeDir := filepath.Join(dir, fmt.Sprintf("node%d-port%d", i, port))
		if err := os.MkdirAll(nodeDir, 0o755); err != nil {
			return nil, err
		}
		return &procServer{bin: bin, dir: nodeDir, port: port, args: args}, nil
	})
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
			if !processAlive(pid, f[1]) {
				_ = os.RemoveAll(m)
			}
		}
	})
}

// procServer is a node of the process backend. A new process is started by
// each launch; its directory (data and log) persists across launches.
type procServer struct {
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

func (p *procServer) dataDir() string { return filepath.Join(p.dir, "data") }
func (p *procServer) logPath() string { return filepath.Join(p.dir, "redis.log") }

func (p *procServer) launch(amnesia bool) error {
	if p.cur != nil && p.exited() == nil {
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
	fmt.Fprintf(logf, "=== redistest: launch at %s (amnesia=%v)\n", time.Now().Format(time.RFC3339Nano), amnesia)
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

func (p *procServer) exited() error {
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
func (p *procServer) signal(sig syscall.Signal) error {
	if p.cur == nil || p.exited() != nil {
		return nil
	}
	err := syscall.Kill(p.cur.cmd.Process.Pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// wait waits up to d for the current process to be reaped.
func (p *procServer) wait(d time.Duration) bool {
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

func (p *procServer) kill() error {
	if err := p.signal(syscall.SIGKILL); err != nil {
		return err
	}
	if !p.wait(stopTimeout) {
		return fmt.Errorf("pid %d did not exit after SIGKILL", p.cur.cmd.Process.Pid)
	}
	return nil
}

func (p *procServer) stop() error {
	if err := p.signal(syscall.SIGTERM); err != nil {
		return err
	}
	_ = p.signal(syscall.SIGCONT) // in case it is stopped
	if p.wait(stopTimeout) {
		return nil
	}
	return p.kill()
}

func (p *procServer) pause() error {
	if err := p.signal(syscall.SIGSTOP); err != nil {
		return err
	}
	return p.waitState(func(s byte) bool { return s == 'T' }, "stopped")
}

func (p *procServer) resume() error {
	if err := p.signal(syscall.SIGCONT); err != nil {
		return err
	}
	return p.waitState(func(s byte) bool { return s != 'T' }, "running")
}

// waitState polls /proc until the process state satisfies ok, so Pause and
// Resume have taken effect when they return. Without /proc it returns at
// once.
func (p *procServer) waitState(ok func(byte) bool, what string) error {
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

func (p *procServer) remove() error {
	if err := p.kill(); err != nil {
		return err
	}
	return os.RemoveAll(p.dir)
}

func (p *procServer) logTail() string {
	b, err := os.ReadFile(p.logPath())
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	return tail(string(b), 20)
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
