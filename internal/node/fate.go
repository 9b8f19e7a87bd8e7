package node

import (
	"context"
	"errors"
	"net"
	"strings"

	"github.com/redis/go-redis/v9"
)

// What a node's error says about the command it answers (docs/design.md,
// "Every command's fate"): whether the command may have run, whether it was
// refused, whether it timed out.

// MayHaveWritten reports whether a command that failed with err may still
// have changed the node: true unless the node itself answered with an
// error reply (READONLY, OOM, NOPERM, WRONGTYPE...), which the scripts send
// only before they write anything, or the command was never written: it
// waited in a queue until its deadline (ErrNotSent), or no connection could
// be made (a dial error).
func MayHaveWritten(err error) bool {
	if err == nil || errors.Is(err, ErrNotSent) || Refused(err) {
		return false
	}
	var op *net.OpError
	return !errors.As(err, &op) || op.Op != "dial"
}

// Refused reports whether err is the node's error reply (READONLY, OOM,
// NOPERM, WRONGTYPE...): the command ran and changed nothing, and sent
// again it would be refused again.
func Refused(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr)
}

// TimedOut reports whether err is a timeout: the command's deadline passed
// before its reply came, or before it was written.
func TimedOut(err error) bool {
	var t interface{ Timeout() bool }
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrNotSent) || errors.As(err, &t) && t.Timeout()
}

// AuthRefusal returns what err means, in the user's terms, when it is a
// node's refusal of the Client's credentials or rights (WRONGPASS, NOAUTH,
// NOPERM or its form inside a script, the "unauthenticated" protocol
// error), which the node will answer again until its password, user or ACL
// rules change; "" otherwise.
func AuthRefusal(err error) string {
	var rerr redis.Error
	if err == nil || !errors.As(err, &rerr) {
		return ""
	}
	msg := rerr.Error()
	switch {
	case strings.HasPrefix(msg, "WRONGPASS"):
		return "wrong password or user"
	case strings.HasPrefix(msg, "NOAUTH"), strings.HasPrefix(msg, "ERR Protocol error: unauthenticated"):
		return "authentication required"
	case strings.HasPrefix(msg, "NOPERM"), strings.HasPrefix(msg, "ERR The user executing the script can't run"):
		return "permission denied"
	}
	return ""
}
