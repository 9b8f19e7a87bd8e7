package sim

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/internal/scripts"
)

func BenchmarkEvalAcquire(b *testing.B) {
	st := newStore()
	e := newEngine(st)
	src := srcOf(scripts.Acquire)
	for i := 0; b.Loop(); i++ {
		if _, err := e.eval(nodeClockBase+int64(i)*1e6, src, []string{"k"}, []string{"tok", "100"}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEvalRelease(b *testing.B) {
	st := newStore()
	e := newEngine(st)
	src := srcOf(scripts.Release)
	for i := 0; b.Loop(); i++ {
		if _, err := e.eval(nodeClockBase, src, []string{"k"}, []string{"tok"}); err != nil {
			b.Fatal(err)
		}
	}
}

type capture struct {
	scripter
	src string
}

func (c *capture) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	c.src = script
	return redis.NewCmd(ctx)
}

func srcOf(s *redis.Script) string {
	c := &capture{}
	s.Eval(context.Background(), c, nil)
	return c.src
}

func BenchmarkNewEngine(b *testing.B) {
	for b.Loop() {
		e := newEngine(newStore())
		e.L.Close()
	}
}
