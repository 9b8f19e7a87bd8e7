// Package rng is a Client's source of random choices: a nil *Source (the
// default) draws from math/rand/v2 and crypto/rand; the simulator gives
// each Client a seeded generator (internal/simhook), so that a schedule
// replays. A Source's methods are safe for concurrent use.
package rng

import (
	crand "crypto/rand"
	"encoding/base64"
	"math/rand/v2"
	"sync"
	"time"
)

// Source draws from next, or, when nil, from math/rand/v2 and crypto/rand.
type Source struct {
	mu   sync.Mutex
	next func() uint64
}

// New returns a Source that draws every choice from next.
func New(next func() uint64) *Source { return &Source{next: next} }

// Duration returns a random duration in [0, d); d must be positive.
func (x *Source) Duration(d time.Duration) time.Duration {
	if x == nil {
		return rand.N(d)
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	return time.Duration(x.next() % uint64(d))
}

// Jitter returns a random duration in [d/2, d].
func (x *Source) Jitter(d time.Duration) time.Duration { return d/2 + x.Duration(d/2+1) }

// Read fills b with random bytes.
func (x *Source) Read(b []byte) {
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

// Token returns 128 random bits as 22 URL-safe base64 characters; its
// error is always nil (it has a token generator's signature).
func (x *Source) Token() (string, error) {
	var b [16]byte
	x.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}
