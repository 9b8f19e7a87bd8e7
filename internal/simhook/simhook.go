// Package simhook lets the test kit's deterministic simulator
// (testkit/internal/sim) make a redlock.Client's random choices repeatable,
// without a public option: retry and renewal jitter, the spread of wake-ups
// and the names of its waiters and renewal sessions, which it otherwise
// draws from math/rand/v2 and crypto/rand. Nothing but the simulator may
// use it: names drawn from a seeded generator are unique only while every
// Client has a generator of its own, seeded apart.
package simhook

// Random, set by package redlock when it is loaded, returns a
// redlock.Option (as any: this package cannot import redlock) under which
// the Client draws its random choices from next, a seeded generator; the
// Client serializes its calls to next.
var Random func(next func() uint64) any
