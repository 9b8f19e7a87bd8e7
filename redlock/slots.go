package redlock

import (
	"strconv"
	"strings"
	"sync"
)

// Redis Cluster hash slots, for naming fencing counters on Cluster pools: a
// script may only touch keys of one slot, so a lock's counter must be in its
// key's slot; one counter per slot bounds them at 16384 per master.

const clusterSlots = 16384

// keySlot is the Redis Cluster hash slot of key: CRC16 (XMODEM) of its hash
// tag (hashTag) or of the whole key, modulo 16384.
func keySlot(key string) int {
	if tag, ok := hashTag(key); ok {
		key = tag
	}
	return int(crc16(key) % clusterSlots)
}

// hashTag returns key's Redis Cluster hash tag, what is between its first
// '{' and the next '}', and whether it has one: it has none when there is
// no such pair or nothing is between them. Redis Cluster and go-redis'
// Ring place a key with a tag by the tag alone, so every key that extends
// it (key + suffix) lands with it.
func hashTag(key string) (string, bool) {
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
	tags := make([]string, clusterSlots)
	for n, left := 0, clusterSlots; left > 0; n++ {
		s := strconv.FormatInt(int64(n), 36)
		if slot := crc16(s) % clusterSlots; tags[slot] == "" {
			tags[slot] = s
			left--
		}
	}
	return tags
})

// fenceKey is the fencing counter of the lock key rkey for cfg: the key's
// own for an election (docs/safety.md, "Leader election": its term is read
// back from it), else fenceKeyOf's.
func (c *Client) fenceKey(cfg *config, rkey string) string {
	if cfg.ownFence {
		return rkey + ":fence"
	}
	return fenceKeyOf(cfg.prefix, rkey, c.slotted)
}

// fenceKeyOf is the fencing counter of the lock key rkey under prefix: one
// per master (prefix + "fence"), or, on Pools whose scripts are confined to
// a hash slot, one per slot, in rkey's slot. Neither can be a lock key
// (prefix{key}) nor a per-key counter of earlier versions (prefix{key}:fence).
func fenceKeyOf(prefix, rkey string, slotted bool) string {
	if !slotted {
		return prefix + "fence"
	}
	return prefix + "{" + slotTags()[keySlot(rkey)] + "}:slot:fence"
}
