-- Extend a shared holder (acquire_shared.lua): make its place, and the key,
-- live at least ARGV[2] ms more, only while the token is a live holder.
-- Never creates a key or a place (a lapsed holder stays lost) and never
-- shortens one: an extend that lands late, after a later extend with a
-- longer TTL, must not cut the holder below its deadline.
-- KEYS[1] lock key; ARGV[1] token; ARGV[2] TTL in milliseconds.
-- Returns 1 when the token is a live shared holder (it now lives at least
-- ARGV[2] ms more), 0 otherwise (nothing changed).
local k, r = KEYS[1], KEYS[1] .. '\31r'
local s, now = place(k, ARGV[1])
if not s or s <= now then
  return 0
end
if now + tonumber(ARGV[2]) > s then
  redis.call('ZADD', r, now + tonumber(ARGV[2]), ARGV[1])
end
live(k, ARGV[2])
live(r, ARGV[2])
return 1
