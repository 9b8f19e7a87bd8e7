package redisproc

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// procAttr makes a child die with SIGKILL if the test binary dies, so an
// interrupted run leaves no redis-server behind.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// procStat returns the state letter and start time (field 22, in clock
// ticks since boot) of pid from /proc, or ok=false.
func procStat(pid int) (state byte, start string, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, "", false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')') // the command name may contain spaces and ')'
	if i < 0 || i+2 >= len(s) {
		return 0, "", false
	}
	f := strings.Fields(s[i+2:]) // f[0] is field 3 (state)
	if len(f) < 20 {
		return 0, "", false
	}
	return f[0][0], f[19], true
}

// ProcessStartTime identifies a process incarnation together with its pid
// (pids are reused); "" if unknown.
func ProcessStartTime(pid int) string {
	_, start, _ := procStat(pid)
	return start
}

// ProcessAlive reports whether pid is a live (non-zombie) process whose
// start time is start (if start is not empty).
func ProcessAlive(pid int, start string) bool {
	if pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	state, st, ok := procStat(pid)
	if !ok {
		return true // signal says it exists; cannot tell more
	}
	if state == 'Z' || state == 'X' {
		return false
	}
	return start == "" || st == start
}
