-- Acquire a lock: set KEYS[1] to our token with a TTL if it is free: absent,
-- or a session lock whose session has ended (lib.lua).
-- A copy of a call that already set the key (a command sent again) finds
-- our token and answers like the first one did.
-- A waiter of Lock joins the key's line when it is taken, and may take a
-- key handed to it (lib.lua).
-- KEYS[1] lock key; ARGV[1] token; ARGV[2] TTL in milliseconds; ARGV[3..6]
-- the waiter, if any (lib.lua, line).
-- Returns 1 when the key holds our token; when it is taken, 0, or, to a
-- waiter, minus the number of waiters in the line (lib.lua, line).
if mark(ARGV[1]) then
  return 0 -- a mark is nobody's token (lib.lua)
end
local o = free_for(KEYS[1], redis.call('GET', KEYS[1]), 3)
if o == ARGV[1] then
  return 1
elseif o then
  return -line(KEYS[1], 3, false)
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
line(KEYS[1], 3, true)
return 1
