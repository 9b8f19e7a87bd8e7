package pool

import (
	"errors"

	"github.com/redis/go-redis/v9"
)

// WithHooks adds go-redis hooks (redis.Hook: tracing, metrics, logging) to
// the client Dial, DialURL or DialFailover creates, in the order given, as
// its AddHook would. Every lock command reaches them with the context
// values of the call that sent it (the caller's context, as passed to
// TryLock, Extend, Release and the rest), but not with its deadline or
// cancellation: the context is never cancelled, and its deadline is the
// latest of its commands' rounds' plus the time a command is followed
// after its round (docs/design.md, "Following a command past its round").
// Where concurrent calls share one pipeline, the pipeline's hook sees the
// values of its first command's call. Commands the Client sends on its own
// (automatic renewals, releases in the background) carry the values of no
// caller. A hook may use the context only until it returns: the Pool reuses
// it for its next commands. Hooks run on the Pool's own goroutines, not the
// caller's: a hook that panics ends the program (no caller can recover it),
// and one that blocks holds up that node's commands, which then fail as not
// sent, and Close, until it returns.
//
// New returns an error for WithHooks: a client the caller owns takes hooks
// through its own AddHook. WithHooks returns an error (from New, Dial,
// DialURL or DialFailover) when a hook is nil.
func WithHooks(hooks ...redis.Hook) Option {
	return func(c *config) error {
		for _, h := range hooks {
			if h == nil {
				return errors.New("pool: WithHooks: a hook is nil")
			}
		}
		c.hooks = append(c.hooks, hooks...)
		return nil
	}
}
