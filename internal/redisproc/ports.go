package redisproc

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// Ports handed out by this process are never handed out again, so a client
// left over from one test can never reach a server of another.
var ports struct {
	sync.Mutex
	used map[int]bool
}

// PickPort returns a currently free 127.0.0.1 TCP port. It prefers ports
// below the kernel's ephemeral range, so that outgoing connections cannot
// occupy the port of a stopped server before it restarts. Callers must still
// cope with losing a race for the port to another process.
func PickPort() (int, error) {
	ports.Lock()
	defer ports.Unlock()
	if ports.used == nil {
		ports.used = map[int]bool{}
	}
	lo, hi := 15000, ephemeralLow()
	for range 200 {
		var port int
		if hi-lo >= 1000 {
			port = lo + rand.IntN(hi-lo)
		} else { // odd range settings: let the kernel choose
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return 0, err
			}
			port = l.Addr().(*net.TCPAddr).Port
			l.Close()
		}
		if ports.used[port] {
			continue
		}
		l, err := net.Listen("tcp", Addr(port))
		if err != nil {
			continue
		}
		l.Close()
		ports.used[port] = true
		return port, nil
	}
	return 0, fmt.Errorf("redisproc: no free TCP port found on 127.0.0.1")
}

// ephemeralLow returns the start of the kernel's ephemeral port range.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) < 1 {
		return 32768
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		return 32768
	}
	return n
}

// Addr returns "127.0.0.1:port".
func Addr(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }
