-- Join the shared holders of a lock key (docs/design.md, "Shared holders").
-- A key with shared holders holds \28 followed by the token of the holder
-- that made it shared: every other script reads that as taken (no token
-- starts with \28). The holders are the members of the sorted set
-- <key>\31r, each scored by the instant it lapses (ms on this node's clock),
-- and the key and the set live as long as the longest-lived holder.
-- A holder joins when the key is free (absent, or a session lock whose
-- session has ended) or already shared, and no waiter of Lock waits in the
-- key's line (lib.lua): those wait for the key alone, and a stream of
-- shared holders must not starve them, so new shared holders wait behind
-- them. A key handed to such a waiter is taken.
-- The set holds at most SHARED_MAX holders (lib.lua): a holder that finds it
-- full after dropping lapsed ones is told "taken".
-- A copy of a call that already joined (a command sent again) finds the
-- token a live holder and answers like the first one did, changing nothing.
-- KEYS[1] lock key; ARGV[1] token; ARGV[2] TTL in milliseconds.
-- Returns 1 when the token is a shared holder, 0 when the key is taken or a
-- waiter for the key alone is in line.
if mark(ARGV[1]) then
  return 0 -- a mark is nobody's token (lib.lua)
end
local k, r = KEYS[1], KEYS[1] .. '\31r'
local v = redis.call('GET', k)
local now = now_ms()
local shared = v and string.byte(v, 1) == 28
if shared and tonumber(redis.call('ZSCORE', r, ARGV[1]) or '0') > now then
  return 1
end
if v and not shared and owner(k, v) or waiting(k) then
  return 0
end
prune(r, now)
if shared and redis.call('ZCARD', r) >= SHARED_MAX then
  return 0
end
if not shared then
  redis.call('DEL', r)
  redis.call('SET', k, '\28' .. ARGV[1], 'PX', ARGV[2])
end
redis.call('ZADD', r, now + tonumber(ARGV[2]), ARGV[1])
live(k, ARGV[2])
live(r, ARGV[2])
return 1
