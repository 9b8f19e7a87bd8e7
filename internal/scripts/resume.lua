-- Resume a lock from its token (Client.Resume): make KEYS[1] live at least
-- ARGV[2] ms more, only while it holds exactly our token, a plain lock's.
-- Like extend.lua it never creates the key and never shortens its TTL, so
-- that a resume landing late, after a release or an expiry, changes nothing.
-- A session lock naming our token is left untouched and answered apart: it
-- is held while its session lives, and the session belongs to the Client
-- that took it, which a resumed handle cannot renew (lib.lua).
-- KEYS[1] lock key; ARGV[1] token; ARGV[2] TTL in milliseconds.
-- Returns 1 when the key holds our token (its TTL is now >= ARGV[2] ms), -1
-- when it holds a session lock of our token, 0 otherwise (absent, expired,
-- handed to a waiter, or held by another token).
if mark(ARGV[1]) then
  return 0 -- a mark is nobody's token (lib.lua)
end
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
  end
  return 1
elseif v and names(v, ARGV[1]) then
  return -1
end
return 0
