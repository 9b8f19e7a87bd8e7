package drift

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestAllowance(t *testing.T) {
	for _, tc := range []struct {
		ttl    time.Duration
		factor float64
		want   time.Duration
	}{
		{10 * time.Second, 0.01, 102 * time.Millisecond},
		{time.Second, 0.01, 12 * time.Millisecond},
		{100 * time.Millisecond, 0.01, 3 * time.Millisecond},
		{10 * time.Second, 0, 2 * time.Millisecond},
		{0, 0.01, 2 * time.Millisecond},
		{-time.Second, 0.01, 2 * time.Millisecond},
		{time.Second, -1, 2 * time.Millisecond},
		{time.Second, math.NaN(), 2 * time.Millisecond},
		{3 * time.Nanosecond, 0.5, 2*time.Millisecond + 2}, // rounds up: 1.5ns → 2ns
		{math.MaxInt64, 0.4, 3689348814741910528 + 2*time.Millisecond},
		{math.MaxInt64, 1e300, math.MaxInt64},
	} {
		if got := Allowance(tc.ttl, tc.factor); got != tc.want {
			t.Errorf("Allowance(%v, %v) = %v, want %v", tc.ttl, tc.factor, got, tc.want)
		}
	}
}

func TestValidity(t *testing.T) {
	for _, tc := range []struct {
		ttl, elapsed time.Duration
		factor       float64
		want         time.Duration
	}{
		{10 * time.Second, 0, 0.01, 10*time.Second - 102*time.Millisecond},
		{10 * time.Second, 5 * time.Millisecond, 0.01, 10*time.Second - 107*time.Millisecond},
		{10 * time.Second, -time.Second, 0.01, 10*time.Second - 102*time.Millisecond},
		{10 * time.Second, 10*time.Second - 102*time.Millisecond, 0.01, 0},
		{10 * time.Second, 11 * time.Second, 0.01, -1102 * time.Millisecond},
		{time.Second, 0, 0, time.Second - 2*time.Millisecond},
		{time.Millisecond, 0, 0.01, -time.Millisecond - 10*time.Microsecond},
		{math.MinInt64 + 1, math.MaxInt64, 0, math.MinInt64},
	} {
		if got := Validity(tc.ttl, tc.elapsed, tc.factor); got != tc.want {
			t.Errorf("Validity(%v, %v, %v) = %v, want %v", tc.ttl, tc.elapsed, tc.factor, got, tc.want)
		}
	}
}

func TestDeadlineMatchesValidity(t *testing.T) {
	start := time.Now()
	for _, elapsed := range []time.Duration{0, time.Millisecond, 3 * time.Second, 20 * time.Second} {
		end := start.Add(elapsed)
		got := Deadline(start, 10*time.Second, 0.01)
		want := end.Add(Validity(10*time.Second, elapsed, 0.01))
		if !got.Equal(want) {
			t.Errorf("elapsed %v: Deadline = %v, end+Validity = %v", elapsed, got, want)
		}
	}
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		ttl     time.Duration
		factor  float64
		timeout time.Duration
		errHas  string // "" means valid
	}{
		{10 * time.Second, 0.01, 50 * time.Millisecond, ""},
		{53 * time.Millisecond, 0, 50 * time.Millisecond, ""},
		{52 * time.Millisecond, 0, 50 * time.Millisecond, "leaves no validity"},
		{0, 0.01, 50 * time.Millisecond, "must be positive"},
		{-time.Second, 0.01, 0, "must be positive"},
		{time.Second, 0.5, 0, "out of range"},
		{time.Second, -0.1, 0, "out of range"},
		{time.Second, math.NaN(), 0, "out of range"},
		{time.Second, 0.01, -1, "must not be negative"},
	} {
		err := Check(tc.ttl, tc.factor, tc.timeout)
		switch {
		case tc.errHas == "" && err != nil:
			t.Errorf("Check(%v, %v, %v) = %v, want nil", tc.ttl, tc.factor, tc.timeout, err)
		case tc.errHas != "" && (err == nil || !strings.Contains(err.Error(), tc.errHas)):
			t.Errorf("Check(%v, %v, %v) = %v, want an error containing %q", tc.ttl, tc.factor, tc.timeout, err, tc.errHas)
		}
	}
}

// FuzzValidity checks the properties the lock relies on for any input:
// validity never exceeds the TTL (less the fixed precision), never grows
// as more time elapses, and the allowance is never below 2 ms.
func FuzzValidity(f *testing.F) {
	f.Add(int64(10*time.Second), int64(time.Millisecond), int64(time.Millisecond), 0.01)
	f.Add(int64(time.Millisecond), int64(0), int64(time.Hour), 0.0)
	f.Add(int64(-5), int64(-7), int64(3), 0.49)
	f.Add(int64(math.MaxInt64), int64(math.MaxInt64), int64(1), 0.3)
	f.Fuzz(func(t *testing.T, ttl, elapsed, more int64, factor float64) {
		a := Allowance(time.Duration(ttl), factor)
		if a < Precision {
			t.Fatalf("Allowance(%v, %v) = %v < %v", ttl, factor, a, Precision)
		}
		v1 := Validity(time.Duration(ttl), time.Duration(elapsed), factor)
		if v1 > time.Duration(ttl)-Precision && time.Duration(ttl) > math.MinInt64+Precision {
			t.Fatalf("Validity(%v, %v, %v) = %v exceeds ttl − %v", ttl, elapsed, factor, v1, Precision)
		}
		if v1 > time.Duration(ttl) {
			t.Fatalf("Validity(%v, %v, %v) = %v exceeds the ttl", ttl, elapsed, factor, v1)
		}
		if more < 0 {
			more = -more
		}
		later := elapsed + more
		if later < elapsed { // overflow: saturate
			later = math.MaxInt64
		}
		if v2 := Validity(time.Duration(ttl), time.Duration(later), factor); v2 > v1 {
			t.Fatalf("Validity grew with elapsed time: %v at %v, %v at %v (ttl %v, factor %v)", v1, elapsed, v2, later, ttl, factor)
		}
	})
}
