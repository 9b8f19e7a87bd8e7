// Command readme is the README's first example, word for word between the
// markers (readme_test.go checks it), so that it compiles as shown.
package main

// README example begins
import (
	"context"
	"errors"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redlock"
)

func main() {
	if err := run([]string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379", "10.0.0.4:6379", "10.0.0.5:6379"}); err != nil {
		log.Fatal(err)
	}
}

func run(addrs []string) error {
	pools := make([]pool.Pool, 0, len(addrs)) // one per independent Redis master
	for _, addr := range addrs {
		p, err := pool.Dial(&redis.Options{Addr: addr})
		if err != nil {
			return err
		}
		defer p.Close()
		pools = append(pools, p)
	}
	client, err := redlock.New(pools)
	if err != nil {
		return err
	}
	defer client.Close()

	// Wait for the lock at most 30 s: with 3 of 5 masters down, no wait ends
	// on its own.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Do waits for the lock, keeps it renewed while fn runs, and releases it.
	err = client.Do(ctx, "orders:42", func(ctx context.Context) error {
		return chargeOrder(ctx, 42) // ctx ends with cause ErrLockLost if the lock is lost
	})
	switch {
	case errors.Is(err, redlock.ErrAuth): // before ErrNotAcquired: it matches both
		return errors.Join(errors.New("the masters refused the password or user"), err)
	case errors.Is(err, redlock.ErrUnavailable): // before ErrNotAcquired: it matches both
		return errors.Join(errors.New("too few Redis masters answered"), err)
	case errors.Is(err, redlock.ErrNotAcquired):
		return errors.Join(errors.New("orders:42 stayed taken for 30 s"), err)
	}
	return err // chargeOrder's, or ErrLockLost joined to it
}

// README example ends

// chargeOrder stands for the work done under the lock.
func chargeOrder(ctx context.Context, id int) error {
	_ = id
	return ctx.Err()
}
