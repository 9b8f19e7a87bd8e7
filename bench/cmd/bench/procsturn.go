package main

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// turns counts the acquisitions of all the procs scenario's children of one
// run, in a file each child maps into its memory. It gives the scenario
// block1's rule across processes: after releasing, a child asks again only
// once another child got the lock (or a second passed), so that the next
// holder is always a waiter woken by its library, never the releaser
// barging back in (which would measure a library's unfairness, not its
// hand-off).
type turns struct {
	mem []byte
	n   *atomic.Uint64
}

// turnsFile names the counter in a run's directory.
func turnsFile(dir string) string { return filepath.Join(dir, "turns") }

// createTurns makes a run's zeroed counter.
func createTurns(dir string) error {
	return os.WriteFile(turnsFile(dir), make([]byte, 8), 0o600)
}

// openTurns maps the counter of the run whose directory is dir.
func openTurns(dir string) (*turns, error) {
	f, err := os.OpenFile(turnsFile(dir), os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	mem, err := unix.Mmap(int(f.Fd()), 0, 8, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, err
	}
	return &turns{mem: mem, n: (*atomic.Uint64)(unsafe.Pointer(&mem[0]))}, nil
}

// took counts an acquisition and returns the count.
func (t *turns) took() uint64 { return t.n.Add(1) }

// waitOther waits until the count moved past mine (another child took the
// lock), a second passed, or deadline (CLOCK_MONOTONIC ns).
func (t *turns) waitOther(mine uint64, deadline int64) {
	for end := mono() + int64(time.Second); t.n.Load() == mine && mono() < min(end, deadline); {
		time.Sleep(100 * time.Microsecond)
	}
}

func (t *turns) close() { _ = unix.Munmap(t.mem) }
