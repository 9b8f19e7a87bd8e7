-- Acquire a lock with a fencing counter: SET KEYS[1] NX PX, and only if that
-- succeeded, increment the counter KEYS[2] in the same atomic step.
-- KEYS[1] lock key; KEYS[2] fence counter (same hash slot, no TTL);
-- ARGV[1] token; ARGV[2] TTL in milliseconds.
-- Returns the new counter (>= 1) when the lock was set, 0 when it was taken.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('INCR', KEYS[2])
end
return 0
