package redlock

import (
	"context"
	"reflect"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/internal/stall"
	"github.com/quorumlock/quorumlock/pool"
)

// TestCheckBound: a Client whose Pools keep the stall clock (pool.Dial's
// and pool.New's, and a wrapper that forwards node.StallClocked) bounds its
// identity checks by it (stall.WithTimeout: a check under way when the
// process stood still goes on); a Client of other Pools by the wall clock
// (context.WithTimeout), which a fake or the simulator runs on.
func TestCheckBound(t *testing.T) {
	name := func(f any) uintptr { return reflect.ValueOf(f).Pointer() }
	m := miniredis.RunT(t)
	p, err := pool.Dial(&redis.Options{Addr: m.Addr()}, pool.WithRestartGuard(0))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if got := checkBound([]pool.Pool{p}); name(got) != name(stall.WithTimeout) {
		t.Error("a Client of Pools from Dial bounds its identity checks by the wall clock; want the stall clock")
	}
	rc := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rc.Close()
	fromNew, err := pool.New(rc)
	if err != nil {
		t.Fatal(err)
	}
	if got := checkBound([]pool.Pool{fromNew}); name(got) != name(stall.WithTimeout) {
		t.Error("a Client of Pools from New bounds its identity checks by the wall clock; want the stall clock")
	}
	if got := checkBound([]pool.Pool{hidden{p}}); name(got) != name(context.WithTimeout) {
		t.Error("a wrapper that does not forward node.StallClocked got the stall clock")
	}
	if got := checkBound(asPools(newMemPools(3))); name(got) != name(context.WithTimeout) {
		t.Error("a Client of fake Pools bounds its identity checks by the stall clock; want the wall clock")
	}
}

// hidden wraps a Pool without forwarding node.StallClocked.
type hidden struct{ pool.Pool }
