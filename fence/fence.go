// Package fence helps resources enforce the fencing tokens of quorumlock
// locks (redlock.WithFencing, Lock.Fence): a resource that remembers the
// highest token it has accepted refuses writes that carry a lower one (tokens
// are unique per holder, so an equal token is the same holder writing again),
// so a holder that was paused past its lock's validity cannot overwrite
// the work of the holder that came after it.
//
// For a resource kept in Redis, Write applies a write atomically (one Lua
// script) only if its token is at least the last one stored. For a SQL
// resource, keep a fence column and make the token part of the update:
//
//	UPDATE accounts SET balance = $2, fence = $1
//	 WHERE id = $3 AND fence <= $1
//
// and treat "0 rows affected" as "my lock has passed to someone else: stop".
// Both are safe for concurrent use.
package fence

import (
	"context"
	_ "embed"
	"errors"
	"strconv"

	"github.com/redis/go-redis/v9"
)

//go:embed fence.lua
var writeSrc string

var writeScript = redis.NewScript(writeSrc)

// ErrStale is returned by Write when the resource has already accepted a
// write with a greater token: the caller's lock has passed to a later
// holder, and it must stop acting on the resource.
var ErrStale = errors.New("fence: stale fencing token: the lock has passed to a later holder")

// ErrNoToken is returned by Write for token 0: the lock was taken without
// redlock.WithFencing(true), and its holder cannot be fenced.
var ErrNoToken = errors.New("fence: token 0: take the lock with redlock.WithFencing(true) to get a fencing token")

// Write stores value in the Redis hash key (fields "value" and "fence") if
// token is at least the fence stored there, atomically. It returns ErrStale,
// and changes nothing, when the stored fence is greater; a Redis error
// otherwise. A token of 0 (a lock without fencing) is refused with
// ErrNoToken before any I/O.
func Write(ctx context.Context, c redis.Scripter, key string, token uint64, value string) error {
	if token == 0 {
		return ErrNoToken
	}
	n, err := writeScript.Run(ctx, c, []string{key}, strconv.FormatUint(token, 10), value).Int64()
	if err != nil {
		return err
	}
	if n == 0 {
		return ErrStale
	}
	return nil
}

// Read returns the value and the fence stored by Write under key ("" and 0
// when nothing was written yet).
func Read(ctx context.Context, c redis.HashCmdable, key string) (value string, token uint64, err error) {
	m, err := c.HGetAll(ctx, key).Result()
	if err != nil {
		return "", 0, err
	}
	if f := m["fence"]; f != "" {
		if token, err = strconv.ParseUint(f, 10, 64); err != nil {
			return "", 0, err
		}
	}
	return m["value"], token, nil
}
