-- Acquire a lock with a fencing counter: set KEYS[1] to our token with a TTL
-- if it is absent, and increment the counter KEYS[2] in the same atomic step.
-- All or nothing: the counter is incremented first, so a counter that is not
-- an integer, or a user without the right to INCR, fails the script before
-- anything is written; the lock key is its last write (a SET refused after
-- the INCR leaves only a higher counter, which fencing allows).
-- A copy of a call that already set the key (a command sent again) finds our
-- token and answers like the first one did, without a second increment.
-- KEYS[1] lock key; KEYS[2] fence counter (same hash slot, no TTL);
-- ARGV[1] token; ARGV[2] TTL in milliseconds.
-- Returns the counter (>= 1) when the key holds our token, 0 when it is taken.
local v = redis.call('GET', KEYS[1])
if v then
  if v == ARGV[1] then
    return tonumber(redis.call('GET', KEYS[2]) or '0')
  end
  return 0
end
local n = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return n
