package redlock

import (
	"context"
	"strconv"
	"testing"
)

// BenchmarkCycle measures the client's own cost of one TryLock + Release
// cycle over 5 in-memory pools (no network, so the numbers are the
// library's: time, bytes and allocations), with and without fencing; compare
// the two within one run: go test -run '^$' -bench Cycle -benchmem ./redlock/
func BenchmarkCycle(b *testing.B) {
	for _, fencing := range []bool{false, true} {
		name := "plain"
		if fencing {
			name = "fenced"
		}
		b.Run(name, func(b *testing.B) {
			c, err := New(asPools(newMemPools(5)), WithFencing(fencing))
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			ctx := context.Background()
			keys := make([]string, 1024)
			for i := range keys {
				keys[i] = "bench-" + strconv.Itoa(i)
			}
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				l, err := c.TryLock(ctx, keys[i%len(keys)])
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Release(ctx); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}
