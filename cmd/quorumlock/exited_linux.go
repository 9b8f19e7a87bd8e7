package main

import (
	"errors"
	"syscall"
	"unsafe"
)

// exitedAlready reports whether the child process pid has exited, without
// reaping it (cmd.Wait does): waitid(P_PID, WEXITED|WNOHANG|WNOWAIT). A
// child already reaped (ECHILD) has exited too.
func exitedAlready(pid int) bool {
	var info [128]byte // siginfo_t: si_signo is its first int32; zero when no child changed state
	const pPID = 1
	_, _, errno := syscall.Syscall6(syscall.SYS_WAITID, pPID, uintptr(pid), uintptr(unsafe.Pointer(&info[0])),
		syscall.WEXITED|syscall.WNOHANG|syscall.WNOWAIT, 0, 0)
	if errno != 0 {
		return errors.Is(errno, syscall.ECHILD)
	}
	return *(*int32)(unsafe.Pointer(&info[0])) == int32(syscall.SIGCHLD)
}
