package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// testTerminal runs exec on a pseudo-terminal, as from an interactive shell:
// the command gets the terminal's foreground, so it can read from it and
// Ctrl-C reaches it, and quorumlock takes the foreground back and exits.
func testTerminal(t *testing.T, addrs string, released func(*testing.T, string)) {
	const key = "exec-terminal"
	ptmx, pts, err := openPTY()
	if err != nil {
		t.Skipf("no pseudo-terminal to test with: %v", err)
	}
	defer ptmx.Close()
	cmd := exec.Command(os.Args[0], "exec", nodeTimeout, freshServers, "--addrs", addrs, key, "--", "sh", "-c",
		`echo "ready $$"; read line; echo "got $line"; exec sleep 50`)
	cmd.Env = append(os.Environ(), envBeCLI+"=1")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = pts, pts, pts
	// A session of its own with the terminal as its controlling terminal:
	// quorumlock's group is the terminal's foreground, as a shell makes it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		pts.Close()
		t.Fatal(err)
	}
	pts.Close()
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	defer func() {
		select {
		case <-done:
		case <-time.After(bound):
			_ = cmd.Process.Kill()
			<-done
		}
	}()

	lines := make(chan string, 100)
	var output strings.Builder
	readerDone := make(chan struct{})
	go func() { // ends with EIO once no process has the terminal open
		defer close(readerDone)
		sc := bufio.NewScanner(ptmx)
		for sc.Scan() {
			lines <- strings.TrimRight(sc.Text(), "\r")
		}
		close(lines)
	}()
	waitLine := func(want string) string {
		t.Helper()
		timeout := time.After(bound)
		for {
			select {
			case line, ok := <-lines:
				if !ok {
					t.Fatalf("terminal closed before %q; output:\n%s", want, output.String())
				}
				output.WriteString(line + "\n")
				if strings.HasPrefix(line, want) {
					return line
				}
			case <-timeout:
				t.Fatalf("no %q on the terminal within %v; output:\n%s", want, bound, output.String())
			}
		}
	}
	pid := strings.TrimPrefix(waitLine("ready "), "ready ")
	if pgid, err := strconv.Atoi(pid); err == nil {
		defer syscall.Kill(-pgid, syscall.SIGKILL) // the command's group, should the test fail
	}
	if _, err := io.WriteString(ptmx, "hello\n"); err != nil {
		t.Fatal(err)
	}
	waitLine("got hello") // a command in a background group would have been stopped (SIGTTIN)
	// Ctrl-C once the shell has become sleep: a shell between commands may
	// put off the signal until the next one ends.
	for end := time.Now().Add(bound); ; time.Sleep(5 * time.Millisecond) {
		comm, err := os.ReadFile("/proc/" + pid + "/comm")
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimSpace(string(comm)) == "sleep" {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("the command did not get to sleep within %v", bound)
		}
	}
	if _, err := ptmx.Write([]byte{3}); err != nil { // Ctrl-C
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(bound):
		t.Fatalf("quorumlock still runs %v after Ctrl-C; output:\n%s", bound, output.String())
	}
	if code := cmd.ProcessState.ExitCode(); code != 128+int(syscall.SIGINT) {
		t.Errorf("exit %d after Ctrl-C, want %d; output:\n%s", code, 128+int(syscall.SIGINT), output.String())
	}
	released(t, key)
	ptmx.Close()
	<-readerDone
	for range lines {
	}
}

// openPTY opens a new pseudo-terminal pair.
func openPTY() (ptmx, pts *os.File, err error) {
	ptmx, err = os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, err
	}
	var unlock int32
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, ptmx.Fd(), syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); errno != 0 {
		ptmx.Close()
		return nil, nil, errno
	}
	var n uint32
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, ptmx.Fd(), syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); errno != 0 {
		ptmx.Close()
		return nil, nil, errno
	}
	pts, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		ptmx.Close()
		return nil, nil, err
	}
	return ptmx, pts, nil
}
