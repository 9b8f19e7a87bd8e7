package scripts_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/internal/redisproc"
	"github.com/quorumlock/quorumlock/internal/scripts"
)

// A semaphore's commands on a real Redis server, landing late: after the
// permit was released, after another token took it, and twice.

const (
	countKey = "quorumlock:{s}\x1fk"
	permit0  = "quorumlock:{s}\x1fp0"
	permit1  = "quorumlock:{s}\x1fp1"
)

type permitEnv struct {
	t   *testing.T
	ctx context.Context
	rdb *redis.Client
}

func newPermitEnv(t *testing.T) *permitEnv {
	return &permitEnv{t: t, ctx: context.Background(), rdb: redisproc.Start(t, 1).Clients(t)[0]}
}

// take runs acquire_permit.lua for permit slot (0-based) of 2.
func (e *permitEnv) take(token string, slot int, ttl int64) string {
	e.t.Helper()
	v, err := scripts.AcquirePermit.Run(e.ctx, e.rdb, []string{countKey, permit0, permit1}, token, ttl, 2, slot+1).Text()
	if err != nil {
		e.t.Fatal(err)
	}
	return v
}

// extend runs extend_permit.lua for permit0.
func (e *permitEnv) extend(token string, ttl int64) int64 {
	e.t.Helper()
	n, err := scripts.ExtendPermit.Run(e.ctx, e.rdb, []string{permit0, countKey}, token, ttl, 2).Int64()
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

func (e *permitEnv) pttl(k string) time.Duration {
	e.t.Helper()
	d, err := e.rdb.PTTL(e.ctx, k).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	return d
}

// TestPermitLateCommands: a late acquire of a permit another token holds
// changes nothing and says which permit is free; a copy of a landed acquire
// answers like it; a late extend after the permit was released, or taken by
// another token, re-creates nothing and lengthens nothing.
func TestPermitLateCommands(t *testing.T) {
	e := newPermitEnv(t)
	if got := e.take("a", 0, 10000); got != "101" {
		t.Fatalf("first acquire: %q, want 1 and permit 1 free", got)
	}
	if got := e.take("a", 0, 10000); got != "101" { // a copy of the same command
		t.Fatalf("a copy of the acquire: %q", got)
	}
	if got := e.take("b", 0, 60000); got != "001" { // late, permit 0 is a's
		t.Fatalf("b's acquire of a's permit: %q, want 0 and permit 1 free", got)
	}
	if v, _ := e.rdb.Get(e.ctx, permit0).Result(); v != "a" || e.pttl(permit0) > 10*time.Second {
		t.Fatalf("a's permit after b's late acquire: %q, TTL %v", v, e.pttl(permit0))
	}
	if e.pttl(countKey) > 10*time.Second {
		t.Fatalf("the count key lengthened by a refused acquire: %v", e.pttl(countKey))
	}
	if n := e.extend("b", 60000); n != 0 { // b never held it
		t.Fatalf("b's extend of a's permit: %d", n)
	}
	if _, err := scripts.Release.Run(e.ctx, e.rdb, []string{permit0}, "a").Result(); err != nil {
		t.Fatal(err)
	}
	if n := e.extend("a", 60000); n != 0 { // late, after a's release
		t.Fatalf("a's late extend after its release: %d", n)
	}
	if n, _ := e.rdb.Exists(e.ctx, permit0).Result(); n != 0 {
		t.Fatal("a late extend re-created the released permit")
	}
	if e.pttl(countKey) > 10*time.Second {
		t.Fatalf("a late extend lengthened the count key: %v", e.pttl(countKey))
	}
	if got := e.take("c", 0, 10000); got != "101" {
		t.Fatalf("c's acquire of the released permit: %q", got)
	}
	if n := e.extend("a", 60000); n != 0 || e.pttl(permit0) > 10*time.Second { // later still, after c took it
		t.Fatalf("a's late extend under c: %d, c's TTL %v", n, e.pttl(permit0))
	}
	got, err := scripts.AcquirePermit.Run(e.ctx, e.rdb, []string{countKey, permit0, permit1}, "e", 10000, 3, 2).Text()
	if err != nil || got != "!2" {
		t.Fatalf("an acquire with 3 permits over a count of 2: %q, %v; want !2", got, err)
	}
	if n, _ := e.rdb.Exists(e.ctx, permit1).Result(); n != 0 {
		t.Fatal("an acquire with another count took a permit")
	}
}
