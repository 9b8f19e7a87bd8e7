-- Take one permit of a counting semaphore: permit ARGV[4] is a lock of its
-- own (docs/safety.md, "Semaphores"), taken like acquire.lua takes a key,
-- and the semaphore's count key declares how many permits it has, so that
-- Clients that disagree on the count are told so instead of admitting more
-- holders than either expects.
-- KEYS[1] the count key; KEYS[2..] the permits' keys, in order; ARGV[1]
-- token; ARGV[2] TTL in milliseconds; ARGV[3] the number of permits (as
-- many as there are permit keys); ARGV[4] the permit to take (1-based).
-- Returns "!" and the declared count when the count key declares another
-- count (nothing is changed); else "1" when the permit's key holds our
-- token (the count key then lives at least as long as it), "0" when it is
-- taken, followed by one '1' (free) or '0' (held, by us or another) per
-- permit, read on this node.
local n, i = tonumber(ARGV[3]), tonumber(ARGV[4])
local c = redis.call('GET', KEYS[1])
if c and c ~= ARGV[3] then
  return '!' .. c
end
local free = {}
for j = 1, n do
  free[j] = redis.call('EXISTS', KEYS[j + 1]) == 1 and '0' or '1'
end
local v = redis.call('GET', KEYS[i + 1])
if v and v ~= ARGV[1] then
  return '0' .. table.concat(free)
end
if not v then
  redis.call('SET', KEYS[i + 1], ARGV[1], 'PX', ARGV[2])
  free[i] = '0'
end
if c then
  live(KEYS[1], ARGV[2])
else
  redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[2])
end
return '1' .. table.concat(free)
