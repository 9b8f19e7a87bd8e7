package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/fence"
)

func TestWrite(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rdb.Close()
	ctx := context.Background()
	if err := fence.Write(ctx, rdb, "res", 0, "zero"); !errors.Is(err, fence.ErrNoToken) {
		t.Fatalf("token 0: %v, want ErrNoToken", err)
	}
	if err := fence.Write(ctx, rdb, "res", 5, "a"); err != nil {
		t.Fatal(err)
	}
	if err := fence.Write(ctx, rdb, "res", 5, "a again"); err != nil { // the same holder writes again
		t.Fatal(err)
	}
	for _, tok := range []uint64{4, 1} {
		if err := fence.Write(ctx, rdb, "res", tok, "stale"); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("token %d after 5: %v, want ErrStale", tok, err)
		}
	}
	if err := fence.Write(ctx, rdb, "res", 1<<60, "b"); err != nil {
		t.Fatal(err)
	}
	v, tok, err := fence.Read(ctx, rdb, "res")
	if v != "b" || tok != 1<<60 || err != nil {
		t.Fatalf("Read = %q, %d, %v", v, tok, err)
	}
	if v, tok, err := fence.Read(ctx, rdb, "nothing"); v != "" || tok != 0 || err != nil {
		t.Fatalf("Read of nothing = %q, %d, %v", v, tok, err)
	}
}

// A holder whose lock passed to a later holder has its write refused.
func ExampleWrite() {
	m := miniredis.NewMiniRedis()
	_ = m.Start()
	defer m.Close()
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rdb.Close()
	ctx := context.Background()

	// Tokens come from Lock.Fence() of locks taken with redlock.WithFencing(true).
	fmt.Println(fence.Write(ctx, rdb, "report:latest", 8, "written by the holder with token 8"))
	err := fence.Write(ctx, rdb, "report:latest", 7, "a late write from the paused holder 7")
	fmt.Println(errors.Is(err, fence.ErrStale))
	v, tok, _ := fence.Read(ctx, rdb, "report:latest")
	fmt.Println(v, tok)
	// Output:
	// <nil>
	// true
	// written by the holder with token 8 8
}

// The SQL pattern: the token is part of the UPDATE, and 0 rows means stale.
func Example_sql() {
	update := func(ctx context.Context, db *sql.DB, id int64, balance int64, token uint64) error {
		res, err := db.ExecContext(ctx,
			`UPDATE accounts SET balance = $2, fence = $1 WHERE id = $3 AND fence <= $1`,
			token, balance, id)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return fence.ErrStale // a later holder has written: stop
		}
		return nil
	}
	_ = update
}
