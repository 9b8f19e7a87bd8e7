package node

import (
	"strconv"
	"strings"
	"sync"
)

// The key-space layout: the names of the keys and channels a lock uses, and
// the bytes that mark the values the nodes keep. The Lua scripts
// (internal/scripts) form the same names; docs/design.md, "Keys".

// RedisKey is the Redis key of the lock named key under prefix:
// prefix{key}. The keys a lock's scripts form from it (its line of
// waiters, a per-slot fencing counter, a semaphore's permits) extend it or
// share its hash slot.
func RedisKey(prefix, key string) string { return prefix + "{" + key + "}" }

// OwnFence is the fencing counter kept beside the lock key rkey: an
// election's (its term is read back from it), and earlier versions' per-key
// counter, which acquires fold in.
func OwnFence(rkey string) string { return rkey + ":fence" }

// FenceKey is the fencing counter of the lock key rkey under prefix: one
// per master (prefix + "fence"), or, on Pools whose scripts are confined to
// a hash slot (slotted), one per slot, in rkey's slot. Neither can be a
// lock key (prefix{key}) nor an OwnFence.
func FenceKey(prefix, rkey string, slotted bool) string {
	if !slotted {
		return prefix + "fence"
	}
	return prefix + "{" + slotTags()[Slot(rkey)] + "}:slot:fence"
}

// SessionKey is the key of the renewal session sid under prefix.
func SessionKey(prefix, sid string) string { return prefix + "s:" + sid }

// SessionSeq is the key of the nodes' sequence of session incarnations
// under prefix.
func SessionSeq(prefix string) string { return prefix + "s:seq" }

// The keys the scripts keep beside a lock key rkey (docs/design.md,
// "Bounds"): its line of waiters (ranked), when each entry of the line
// lapses, the waiters that left the line for good, and its shared holders.
// Each ends in Sep and one letter, which no lock key does.
const (
	LineSuffix    = string(Sep) + "q"
	LapseSuffix   = string(Sep) + "x"
	LeftSuffix    = string(Sep) + "g"
	HoldersSuffix = string(Sep) + "r"
	// CountSuffix follows a semaphore's name's key in the key of its
	// declared count.
	CountSuffix = string(Sep) + "k"
	// PermitSuffix and the permit's number follow a semaphore's name's key
	// in the key of that permit (PermitKey).
	PermitSuffix = string(Sep) + "p"
)

// PermitKey is the key of permit i of the semaphore whose name's key is
// rkey.
func PermitKey(rkey string, i int) string { return rkey + PermitSuffix + strconv.Itoa(i) }

// HandChannel is the channel on which the nodes tell the Client named
// client that they handed rkey to one of its waiters (lib.lua, tell);
// rkey itself is the channel of the key's releases.
func HandChannel(rkey, client string) string {
	return rkey + string(Sep) + "w" + client
}

// WaiterName is the name of the Client client's n-th waiter in the lines:
// the release script hands keys to it by this name, and publishes the
// hand-off on HandChannel(rkey, client).
func WaiterName(client string, n uint64) string {
	return client + "." + strconv.FormatUint(n, 36)
}

// ClusterSlots is how many hash slots Redis Cluster has. A script may only
// touch keys of one slot, so a lock's fencing counter on a Cluster is in its
// key's slot: one counter per slot bounds them at 16384 per master.
const ClusterSlots = 16384

// Slot returns the Redis Cluster hash slot of key: CRC16 (XMODEM) of its hash
// tag (HashTag) or of the whole key, modulo 16384.
func Slot(key string) int {
	if tag, ok := HashTag(key); ok {
		key = tag
	}
	return int(crc16(key) % ClusterSlots)
}

// HashTag returns key's Redis Cluster hash tag, what is between its first
// '{' and the next '}', and whether it has one: it has none when there is
// no such pair or nothing is between them. Redis Cluster and go-redis'
// Ring place a key with a tag by the tag alone, so every key that extends
// it (key + suffix) lands with it.
func HashTag(key string) (string, bool) {
	i := strings.IndexByte(key, '{')
	if i < 0 {
		return "", false
	}
	j := strings.IndexByte(key[i+1:], '}')
	if j <= 0 {
		return "", false
	}
	return key[i+1 : i+1+j], true
}

func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// slotTags returns, for every slot, a short string whose hash is that slot:
// the first base-36 numbers that cover all slots.
var slotTags = sync.OnceValue(func() []string {
	tags := make([]string, ClusterSlots)
	for n, left := 0, ClusterSlots; left > 0; n++ {
		s := strconv.FormatInt(int64(n), 36)
		if slot := crc16(s) % ClusterSlots; tags[slot] == "" {
			tags[slot] = s
			left--
		}
	}
	return tags
})

// SessionValue reports whether v, a lock key's value, is a session lock's,
// which only a script can tell held or free.
func SessionValue(v string) bool { return strings.IndexByte(v, Sep) >= 0 }

// ParseSession reads v, the value of lock key k, as a session lock's:
// token Sep incarnation Sep prefix length (internal/scripts/lib.lua). It
// returns the token, the incarnation and the session key (the prefix of k,
// "s:" and the token's first 16 bytes), or ok false for any other value.
func ParseSession(k, v string) (token, inc, sessionKey string, ok bool) {
	token, rest, ok1 := strings.Cut(v, string(Sep))
	inc, plen, ok2 := strings.Cut(rest, string(Sep))
	n, err := strconv.Atoi(plen)
	digits := plen != "" && strings.Trim(plen, "0123456789") == ""
	if !ok1 || !ok2 || !digits || err != nil || n > len(k) || len(token) < 16 || inc == "" {
		return "", "", "", false
	}
	return token, inc, k[:n] + "s:" + token[:16], true
}

// Sep separates a session lock's token from its incarnation in the key's
// value; no token contains it.
const Sep = '\x1f'

// Meta separates a token from the holder's description (redlock's
// WithMetadata), which travels in the token: no generated token contains it.
const Meta = '\x1d'

// SplitToken returns a token's own part and the description it carries
// ("" when none).
func SplitToken(token string) (own, meta string) {
	own, meta, _ = strings.Cut(token, string(Meta))
	return own, meta
}

// SharedMark starts the value of a key with shared holders: the holders
// are kept beside it (internal/scripts/acquire_shared.lua), and no token
// starts with it, so every script reads the key as taken.
const SharedMark = '\x1c'

// SharedValue reports whether v, a lock key's value, is a key with shared
// holders.
func SharedValue(v string) bool { return v != "" && v[0] == SharedMark }

// Handed starts the value of a key a release handed to the first waiter of
// its line (internal/scripts/lib.lua): no token contains it, and such a
// key is free for that waiter only, for a short grace.
const Handed = '\x1e'

// HandedValue reports whether v, a lock key's value, is a key handed to a
// waiter: held by no lock.
func HandedValue(v string) bool { return v != "" && v[0] == Handed }

// Marks are the bytes that mark values the nodes keep (SharedMark, Handed,
// Sep): no token contains one, and every script refuses a token that does
// (internal/scripts/lib.lua, mark).
const Marks = string(SharedMark) + string(Handed) + string(Sep)

// MarkIn returns the index of the first mark byte (Marks) in s, or -1.
func MarkIn(s string) int { return strings.IndexAny(s, Marks) }
