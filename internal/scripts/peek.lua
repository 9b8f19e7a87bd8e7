-- Read who holds a lock: the token KEYS[1] holds, "" when it is free
-- (absent, a session lock whose session has ended, or a key handed to a
-- waiter that has not taken it yet: lib.lua). A value
-- that is no lock (a fencing counter) is returned as it is.
-- KEYS[1] the key. Returns a string.
local v = redis.call('GET', KEYS[1])
if not v or string.byte(v, 1) == 30 then
  return ''
end
return owner(KEYS[1], v) or ''
