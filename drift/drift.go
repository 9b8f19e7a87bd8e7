package drift

import (
	"fmt"
	"math"
	"time"
)

// DefaultFactor is the clock-rate error assumed between the client and each
// Redis server when none is configured: 1 %.
const DefaultFactor = 0.01

// MaxFactor bounds the factor accepted by [Check]: with factor 0.5 or more,
// half the TTL or more would go to the allowance, which no useful
// configuration wants.
const MaxFactor = 0.5

// Precision is the fixed part of the allowance: Redis expires keys with 1 ms
// precision, and a further millisecond covers rounding of the TTL to whole
// milliseconds on the wire.
const Precision = 2 * time.Millisecond

// Allowance returns the part of ttl that is never counted as valid:
// ttl × factor + [Precision], rounded up to the nanosecond. A negative ttl or
// factor counts as zero, so the result is never below Precision.
func Allowance(ttl time.Duration, factor float64) time.Duration {
	if ttl <= 0 || !(factor > 0) { // !(>0) also catches NaN
		return Precision
	}
	d := math.Ceil(float64(ttl) * factor)
	if d >= float64(math.MaxInt64-Precision) {
		return math.MaxInt64
	}
	return time.Duration(d) + Precision
}

// Validity returns how long a lock with the given ttl stays valid after a
// round that took elapsed: ttl − elapsed − Allowance(ttl, factor). The result
// may be zero or negative, in which case the lock must not be reported as
// acquired. It never exceeds ttl − Precision and never grows with elapsed.
// A negative elapsed (a clock that ran backwards) counts as zero.
func Validity(ttl, elapsed time.Duration, factor float64) time.Duration {
	if elapsed < 0 {
		elapsed = 0
	}
	return sub(sub(ttl, Allowance(ttl, factor)), elapsed)
}

// sub returns a − b for b ≥ 0, saturating at the smallest Duration instead of
// wrapping around.
func sub(a, b time.Duration) time.Duration {
	if a < math.MinInt64+b {
		return math.MinInt64
	}
	return a - b
}

// Deadline returns the instant on the local clock at which a lock acquired
// (or extended) in a round that started at start stops being valid:
// start + ttl − Allowance(ttl, factor). It is the same instant as
// end + Validity(ttl, end−start, factor) for any end of the round.
func Deadline(start time.Time, ttl time.Duration, factor float64) time.Time {
	return start.Add(sub(ttl, Allowance(ttl, factor)))
}

// Check reports whether ttl and factor can give a lock any validity at all
// when each node may take up to nodeTimeout to answer: ttl must exceed
// Allowance(ttl, factor) + nodeTimeout, and factor must lie in [0, MaxFactor).
// The error says which value to change.
func Check(ttl time.Duration, factor float64, nodeTimeout time.Duration) error {
	if math.IsNaN(factor) || factor < 0 || factor >= MaxFactor {
		return fmt.Errorf("drift factor %v is out of range: use a value in [0, %v); the default is %v", factor, MaxFactor, DefaultFactor)
	}
	if ttl <= 0 {
		return fmt.Errorf("TTL %v must be positive", ttl)
	}
	if nodeTimeout < 0 {
		return fmt.Errorf("node timeout %v must not be negative", nodeTimeout)
	}
	if need := Allowance(ttl, factor) + nodeTimeout; ttl <= need {
		return fmt.Errorf("TTL %v leaves no validity: it must exceed the drift allowance %v plus the node timeout %v; raise the TTL or lower the node timeout", ttl, Allowance(ttl, factor), nodeTimeout)
	}
	return nil
}
