-- Release a shared holder (acquire_shared.lua): take the token out of the
-- key's holders. The key then lives as long as its longest-lived remaining
-- holder; when none is left, it is deleted, handed to the first waiter of
-- its line when asked to (lib.lua, hand_off), and the release is told as
-- release.lua tells it, with the key's value (\28 and the token that made
-- it shared) as the released token, or, when it was handed to a waiter, \28
-- and that waiter (lib.lua, let_go): the same on every node.
-- KEYS[1] lock key; ARGV[1] token; ARGV[2] the grace in ms a waiter the key
-- is handed to gets (absent or 0: no hand-off).
-- Returns 1 when the token was a live shared holder (now gone), else 0
-- (a lapsed holder is taken out all the same; nothing else changes).
local k, r = KEYS[1], KEYS[1] .. '\31r'
local s, now, v = place(k, ARGV[1])
if not s then
  return 0
end
redis.call('ZREM', r, ARGV[1])
prune(r, now)
local top = redis.call('ZRANGE', r, -1, -1)[1]
local last = tonumber(top and redis.call('ZSCORE', r, top) or '0')
if last > now then
  redis.call('PEXPIRE', k, last - now)
  redis.call('PEXPIRE', r, last - now)
else
  redis.call('DEL', k, r)
  let_go(k, v, ARGV[2], true)
end
if s > now then
  return 1
end
return 0
