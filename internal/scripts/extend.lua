-- Extend a lock: make KEYS[1] live at least ARGV[2] ms more, only while it
-- holds our token. Never creates the key (a lock that expired stays lost)
-- and never shortens its TTL: an extend that lands late, after a later
-- extend with a longer TTL, must not cut the key below the holder's deadline.
-- A session lock's key (lib.lua) is extended while it names our token: its
-- TTL only collects it once its session has ended.
-- KEYS[1] lock key; ARGV[1] token; ARGV[2] new TTL in milliseconds.
-- Returns 1 when the key holds our token (its TTL is now >= ARGV[2] ms),
-- 0 otherwise (absent, expired, or held by another token: left untouched).
if mark(ARGV[1]) then
  return 0 -- a mark is nobody's token (lib.lua)
end
local v = redis.call('GET', KEYS[1])
if not v or not names(v, ARGV[1]) then
  return 0
end
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 1
