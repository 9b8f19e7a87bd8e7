package sim

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// store is one simulated node's keyspace: strings and sorted sets with
// expiry, on the node's own clock (now, in nanoseconds of node time). It
// implements the commands the library's scripts call (internal/scripts),
// with Redis' replies; anything else is an error, so a script that starts
// using a new command fails the simulation instead of passing silently.
// It is used by one node's goroutine at a time (the node's mutex).
type store struct {
	keys map[string]*value
	pubs []message // published by the script running, for the node to send
}

type message struct{ channel, message string }

type value struct {
	str  string
	zset map[string]float64 // nil for a string
	exp  int64              // node time (ns) it expires at; 0: never
}

func newStore() *store { return &store{keys: map[string]*value{}} }

// errWrongType is Redis' reply to a command on a key of the other type.
var errWrongType = errors.New("WRONGTYPE Operation against a key holding the wrong kind of value")

// live returns key's value unless it is absent or expired (deleting it).
func (s *store) live(key string, now int64) *value {
	v := s.keys[key]
	if v != nil && v.exp != 0 && now >= v.exp {
		delete(s.keys, key)
		return nil
	}
	return v
}

// status is a Redis status reply ("OK").
type status string

// call runs one command; its reply is int64, string, status, nil (a nil
// bulk reply), []any, or an error reply.
func (s *store) call(now int64, args []string) (any, error) {
	if len(args) == 0 {
		return nil, errors.New("ERR Please specify at least one argument for this redis lib call")
	}
	name, a := strings.ToUpper(args[0]), args[1:]
	if f, ok := commands[name]; ok {
		if len(a) < f.min {
			return nil, fmt.Errorf("ERR wrong number of arguments for '%s' command", strings.ToLower(name))
		}
		return f.run(s, now, a)
	}
	return nil, fmt.Errorf("ERR sim: unknown command '%s' (internal/sim implements only what the scripts use)", name)
}

type command struct {
	min int // arguments at least
	run func(s *store, now int64, a []string) (any, error)
}

var commands map[string]command

func init() {
	commands = map[string]command{
		"GET":           {1, (*store).get},
		"SET":           {2, (*store).set},
		"DEL":           {1, (*store).del},
		"EXISTS":        {1, (*store).exists},
		"INCR":          {1, (*store).incr},
		"PEXPIRE":       {2, (*store).pexpire},
		"PTTL":          {1, (*store).pttl},
		"TIME":          {0, (*store).time},
		"PUBLISH":       {2, (*store).publish},
		"ZADD":          {3, (*store).zadd},
		"ZCARD":         {1, (*store).zcard},
		"ZSCORE":        {2, (*store).zscore},
		"ZREM":          {2, (*store).zrem},
		"ZRANGE":        {3, (*store).zrange},
		"ZRANGEBYSCORE": {3, (*store).zrangebyscore},
	}
}

func (s *store) str(key string, now int64) (*value, error) {
	v := s.live(key, now)
	if v != nil && v.zset != nil {
		return nil, errWrongType
	}
	return v, nil
}

func (s *store) zset(key string, now int64) (*value, error) {
	v := s.live(key, now)
	if v != nil && v.zset == nil {
		return nil, errWrongType
	}
	return v, nil
}

func (s *store) get(now int64, a []string) (any, error) {
	v, err := s.str(a[0], now)
	if v == nil || err != nil {
		return nil, err
	}
	return v.str, nil
}

// set is SET key value [PX ms] (no other option is used by the scripts): a
// SET without PX clears the TTL, as in Redis.
func (s *store) set(now int64, a []string) (any, error) {
	var exp int64
	switch {
	case len(a) == 4 && strings.EqualFold(a[2], "PX"):
		ms, err := strconv.ParseInt(a[3], 10, 64)
		if err != nil || ms <= 0 {
			return nil, errors.New("ERR invalid expire time in 'set' command")
		}
		exp = now + ms*1e6
	case len(a) != 2:
		return nil, fmt.Errorf("ERR sim: SET with options %q", a[2:])
	}
	s.keys[a[0]] = &value{str: a[1], exp: exp}
	return status("OK"), nil
}

func (s *store) del(now int64, a []string) (any, error) {
	n := int64(0)
	for _, k := range a {
		if s.live(k, now) != nil {
			delete(s.keys, k)
			n++
		}
	}
	return n, nil
}

func (s *store) exists(now int64, a []string) (any, error) {
	n := int64(0)
	for _, k := range a {
		if s.live(k, now) != nil {
			n++
		}
	}
	return n, nil
}

func (s *store) incr(now int64, a []string) (any, error) {
	v, err := s.str(a[0], now)
	if err != nil {
		return nil, err
	}
	n := int64(0)
	if v != nil {
		if n, err = strconv.ParseInt(v.str, 10, 64); err != nil {
			return nil, errors.New("ERR value is not an integer or out of range")
		}
	} else {
		v = &value{}
		s.keys[a[0]] = v
	}
	n++
	v.str = strconv.FormatInt(n, 10)
	return n, nil
}

// pexpire is PEXPIRE key ms [GT]: GT sets the TTL only when it is longer
// than the current one (a key without a TTL counts as infinite).
func (s *store) pexpire(now int64, a []string) (any, error) {
	ms, err := strconv.ParseInt(a[1], 10, 64)
	if err != nil {
		return nil, errors.New("ERR value is not an integer or out of range")
	}
	gt := false
	switch {
	case len(a) == 3 && strings.EqualFold(a[2], "GT"):
		gt = true
	case len(a) != 2:
		return nil, fmt.Errorf("ERR sim: PEXPIRE with options %q", a[2:])
	}
	v := s.live(a[0], now)
	if v == nil {
		return int64(0), nil
	}
	exp := now + ms*1e6
	if gt && (v.exp == 0 || exp <= v.exp) {
		return int64(0), nil
	}
	if ms <= 0 {
		delete(s.keys, a[0])
		return int64(1), nil
	}
	v.exp = exp
	return int64(1), nil
}

func (s *store) pttl(now int64, a []string) (any, error) {
	v := s.live(a[0], now)
	switch {
	case v == nil:
		return int64(-2), nil
	case v.exp == 0:
		return int64(-1), nil
	}
	return (v.exp - now) / 1e6, nil
}

func (s *store) time(now int64, _ []string) (any, error) {
	sec, us := now/1e9, now%1e9/1e3
	return []any{strconv.FormatInt(sec, 10), strconv.FormatInt(us, 10)}, nil
}

// publish queues the message; the node sends it to the subscribers once
// the script is over. The reply (receivers) is not what Redis would say,
// but no script reads it.
func (s *store) publish(_ int64, a []string) (any, error) {
	s.pubs = append(s.pubs, message{a[0], a[1]})
	return int64(0), nil
}

// zadd is ZADD key score member (one pair, no flags: what the scripts use).
func (s *store) zadd(now int64, a []string) (any, error) {
	if len(a) != 3 {
		return nil, fmt.Errorf("ERR sim: ZADD with %d arguments", len(a))
	}
	score, err := strconv.ParseFloat(a[1], 64)
	if err != nil || math.IsNaN(score) {
		return nil, errors.New("ERR value is not a valid float")
	}
	v, err := s.zset(a[0], now)
	if err != nil {
		return nil, err
	}
	if v == nil {
		v = &value{zset: map[string]float64{}}
		s.keys[a[0]] = v
	}
	_, had := v.zset[a[2]]
	v.zset[a[2]] = score
	if had {
		return int64(0), nil
	}
	return int64(1), nil
}

func (s *store) zcard(now int64, a []string) (any, error) {
	v, err := s.zset(a[0], now)
	if v == nil || err != nil {
		return int64(0), err
	}
	return int64(len(v.zset)), nil
}

func (s *store) zscore(now int64, a []string) (any, error) {
	v, err := s.zset(a[0], now)
	if v == nil || err != nil {
		return nil, err
	}
	sc, ok := v.zset[a[1]]
	if !ok {
		return nil, nil
	}
	return strconv.FormatFloat(sc, 'g', 17, 64), nil
}

func (s *store) zrem(now int64, a []string) (any, error) {
	v, err := s.zset(a[0], now)
	if v == nil || err != nil {
		return int64(0), err
	}
	n := int64(0)
	for _, m := range a[1:] {
		if _, ok := v.zset[m]; ok {
			delete(v.zset, m)
			n++
		}
	}
	if len(v.zset) == 0 {
		delete(s.keys, a[0])
	}
	return n, nil
}

// sorted returns v's members in Redis' order: by score, then by member.
func sorted(v *value) []string {
	ms := make([]string, 0, len(v.zset))
	for m := range v.zset {
		ms = append(ms, m)
	}
	slices.SortFunc(ms, func(x, y string) int {
		if sx, sy := v.zset[x], v.zset[y]; sx != sy {
			if sx < sy {
				return -1
			}
			return 1
		}
		return strings.Compare(x, y)
	})
	return ms
}

// zrange is ZRANGE key start stop; negative indexes count from the end.
func (s *store) zrange(now int64, a []string) (any, error) {
	start, err1 := strconv.Atoi(a[1])
	stop, err2 := strconv.Atoi(a[2])
	if err1 != nil || err2 != nil || len(a) != 3 {
		return nil, fmt.Errorf("ERR sim: ZRANGE %q", a[1:])
	}
	v, err := s.zset(a[0], now)
	if v == nil || err != nil {
		return []any{}, err
	}
	ms := sorted(v)
	if start < 0 {
		start += len(ms)
	}
	if stop < 0 {
		stop += len(ms)
	}
	out := []any{}
	for i, m := range ms {
		if i >= start && i <= stop {
			out = append(out, m)
		}
	}
	return out, nil
}

// zrangebyscore is ZRANGEBYSCORE key min max [LIMIT offset count], with
// -inf/+inf and '(' for an exclusive bound.
func (s *store) zrangebyscore(now int64, a []string) (any, error) {
	in, err := scoreRange(a[1], a[2])
	if err != nil {
		return nil, err
	}
	off, count := 0, -1
	switch {
	case len(a) == 6 && strings.EqualFold(a[3], "LIMIT"):
		o, err1 := strconv.Atoi(a[4])
		c, err2 := strconv.Atoi(a[5])
		if err1 != nil || err2 != nil || o < 0 {
			return nil, fmt.Errorf("ERR sim: ZRANGEBYSCORE LIMIT %q", a[4:])
		}
		off, count = o, c
	case len(a) != 3:
		return nil, fmt.Errorf("ERR sim: ZRANGEBYSCORE %q", a[1:])
	}
	v, err := s.zset(a[0], now)
	if v == nil || err != nil {
		return []any{}, err
	}
	out := []any{}
	for _, m := range sorted(v) {
		if in(v.zset[m]) {
			if off > 0 {
				off--
			} else if count < 0 || len(out) < count {
				out = append(out, m)
			}
		}
	}
	return out, nil
}

// scoreRange reads the bounds of a score range, each inclusive unless it
// starts with '('.
func scoreRange(min, max string) (func(float64) bool, error) {
	lo, loOpen, err1 := bound(min)
	hi, hiOpen, err2 := bound(max)
	if err1 != nil || err2 != nil {
		return nil, errors.New("ERR min or max is not a float")
	}
	return func(sc float64) bool {
		return (sc > lo || !loOpen && sc == lo) && (sc < hi || !hiOpen && sc == hi)
	}, nil
}

func bound(s string) (float64, bool, error) {
	open := strings.HasPrefix(s, "(")
	f, err := score(strings.TrimPrefix(s, "("))
	return f, open, err
}

func score(s string) (float64, error) {
	switch strings.ToLower(s) {
	case "-inf":
		return math.Inf(-1), nil
	case "+inf", "inf":
		return math.Inf(1), nil
	}
	return strconv.ParseFloat(s, 64)
}
