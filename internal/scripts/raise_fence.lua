-- Raise a fencing counter to the maximum a quorum reported, while the lock
-- is still ours: a later holder's INCR on this node then returns more.
-- KEYS[1] lock key; KEYS[2] fence counter; ARGV[1] token; ARGV[2] maximum.
-- Returns 1 when the lock holds our token (the counter is now >= ARGV[2]),
-- 0 otherwise (nothing changed).
local v = redis.call('GET', KEYS[1])
if not v or owner(KEYS[1], v) ~= ARGV[1] then
  return 0
end
local cur = tonumber(redis.call('GET', KEYS[2]) or '0')
if cur < tonumber(ARGV[2]) then
  redis.call('SET', KEYS[2], ARGV[2])
end
return 1
