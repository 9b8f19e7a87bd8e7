-- Raise a fencing counter to the maximum a quorum reported, while the lock
-- is still ours: a later holder's INCR on this node then returns more.
-- KEYS[1] lock key; KEYS[2] fence counter; KEYS[3..], for a multi-key lock,
-- its other keys; ARGV[1] token; ARGV[2] maximum.
-- Returns 1 when every lock key holds our token (the counter is now >=
-- ARGV[2]), 0 otherwise (nothing changed).
if mark(ARGV[1]) then
  return 0 -- a mark is nobody's token (lib.lua)
end
for i, k in ipairs(KEYS) do
  if i ~= 2 then
    local v = redis.call('GET', k)
    if not v or owner(k, v) ~= ARGV[1] then
      return 0
    end
  end
end
local cur = tonumber(redis.call('GET', KEYS[2]) or '0')
if cur < tonumber(ARGV[2]) then
  redis.call('SET', KEYS[2], ARGV[2])
end
return 1
