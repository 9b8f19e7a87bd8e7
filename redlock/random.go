package redlock

import (
	crand "crypto/rand"
	"encoding/base64"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/quorumlock/quorumlock/internal/simhook"
)

// random is a Client's source of random choices: nil (the default) draws
// from math/rand/v2 and crypto/rand; the simulator gives each Client a
// seeded generator (internal/simhook), so that a schedule replays. Its
// methods are safe for concurrent use.
type random struct {
	mu   sync.Mutex
	next func() uint64
}

func init() {
	simhook.Random = func(next func() uint64) any {
		return Option(func(c *config) error {
			c.rnd = &random{next: next}
			if !c.customToken {
				c.token = c.rnd.token // still the library's tokens: sessions apply
			}
			return nil
		})
	}
}

// duration returns a random duration in [0, d); d must be positive.
func (x *random) duration(d time.Duration) time.Duration {
	if x == nil {
		return rand.N(d)
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	return time.Duration(x.next() % uint64(d))
}

// read fills b with random bytes.
func (x *random) read(b []byte) {
	if x == nil {
		_, _ = crand.Read(b) // never fails (crypto/rand's documented contract)
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	for i := range b {
		b[i] = byte(x.next())
	}
}

// jitter returns a random duration in [d/2, d].
func (c *config) jitter(d time.Duration) time.Duration { return d/2 + c.rnd.duration(d/2+1) }

// token is randomToken drawn from x.
func (x *random) token() (string, error) {
	var b [16]byte
	x.read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}
