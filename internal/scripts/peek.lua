-- Read who holds a lock: the token KEYS[1] holds, "" when it is free
-- (absent, or a session lock whose session has ended: lib.lua). A value
-- that is no lock (a fencing counter) is returned as it is.
-- KEYS[1] the key. Returns a string.
local v = redis.call('GET', KEYS[1])
if not v then
  return ''
end
return owner(KEYS[1], v) or ''
