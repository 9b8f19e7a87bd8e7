-- Apply a write to a fenced resource kept in a Redis hash: only if the
-- writer's fencing token is at least the last one the resource saw (tokens
-- are unique per holder: an equal token is the same holder writing again).
-- KEYS[1] the resource (a hash with fields "value" and "fence");
-- ARGV[1] the writer's token (decimal); ARGV[2] the new value.
-- Returns 1 when written, 0 when the token was lower (a stale writer).
local last = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0')
if tonumber(ARGV[1]) >= last then
  redis.call('HSET', KEYS[1], 'value', ARGV[2], 'fence', ARGV[1])
  return 1
end
return 0
