-- Acquire a lock: set KEYS[1] to our token with a TTL if it is free: absent,
-- or a session lock whose session has ended (lib.lua).
-- A copy of a call that already set the key (a command sent again) finds
-- our token and answers like the first one did.
-- KEYS[1] lock key; ARGV[1] token; ARGV[2] TTL in milliseconds.
-- Returns 1 when the key holds our token, 0 when it is taken.
local v = redis.call('GET', KEYS[1])
if v then
  local o = owner(KEYS[1], v)
  if o == ARGV[1] then
    return 1
  elseif o then
    return 0
  end
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
