//go:build !linux

package redisproc

import (
	"errors"
	"syscall"
)

func procAttr() *syscall.SysProcAttr { return nil }

func ProcessStartTime(pid int) string { return "" }

func ProcessAlive(pid int, start string) bool {
	if pid <= 0 {
		return false
	}
	return !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

func procStat(pid int) (state byte, start string, ok bool) { return 0, "", false }
