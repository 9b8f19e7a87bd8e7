-- Extend a permit of a counting semaphore: like extend.lua, and the
-- semaphore's count key is made to live as long, so that the count stays
-- declared while any permit is held (acquire_permit.lua).
-- KEYS[1] the permit's key; KEYS[2] the count key; ARGV[1] token; ARGV[2]
-- new TTL in milliseconds; ARGV[3] the number of permits.
-- Returns 1 when the permit's key holds our token (both keys now live at
-- least ARGV[2] ms), 0 otherwise (nothing is changed).
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
live(KEYS[1], ARGV[2])
if redis.call('EXISTS', KEYS[2]) == 1 then
  live(KEYS[2], ARGV[2])
else
  redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[2])
end
return 1
