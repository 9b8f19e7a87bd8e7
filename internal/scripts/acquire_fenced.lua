-- Acquire a lock with a fencing counter: set KEYS[1] to our token with a TTL
-- if it is free (absent, or a session lock whose session has ended: lib.lua),
-- and increment the counter KEYS[2] in the same atomic step.
-- KEYS[2] is shared by many lock keys (one per master, or per hash slot):
-- a key's tokens still increase, since the counter never decreases.
-- KEYS[3] is the key's own counter of earlier versions, if any: it is
-- folded in (the counter is raised above it) and deleted, so that a key's
-- tokens keep increasing across the change and its counter is reclaimed.
-- All or nothing: the counter is incremented first, so a counter that is not
-- an integer, or a user without the right to INCR, fails the script before
-- anything is written; the lock key is its last write (a SET refused after
-- the INCR leaves only a higher counter, which fencing allows).
-- A copy of a call that already set the key (a command sent again) finds our
-- token and answers with the counter as it is now, without an increment.
-- KEYS[1] lock key; KEYS[2] fence counter; KEYS[3] the key's old counter
-- (all in one hash slot, no TTL); ARGV[1] token; ARGV[2] TTL in milliseconds;
-- ARGV[3..6] the waiter, if any (lib.lua, line: a waiter of Lock joins the
-- key's line when it is taken, and may take a key handed to it).
-- Returns the counter (>= 1) when the key holds our token, 0 when it is
-- taken (not the line's length, as the plain acquire answers: a counter
-- changed outside quorumlock could be negative, and must read as an error).
if mark(ARGV[1]) then
  return 0 -- a mark is nobody's token (lib.lua)
end
local o = free_for(KEYS[1], redis.call('GET', KEYS[1]), 3)
if o == ARGV[1] then
  return tonumber(redis.call('GET', KEYS[2]) or '0')
elseif o then
  line(KEYS[1], 3, false)
  return 0
end
local n = redis.call('INCR', KEYS[2])
local old = KEYS[3] ~= KEYS[2] and tonumber(redis.call('GET', KEYS[3]) or '')
if old then
  if old >= n then
    n = old + 1
    redis.call('SET', KEYS[2], n)
  end
  redis.call('DEL', KEYS[3])
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
line(KEYS[1], 3, true)
return n
