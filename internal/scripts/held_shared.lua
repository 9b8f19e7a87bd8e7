-- Whether the token is a live shared holder of the lock key
-- (acquire_shared.lua). Writes nothing.
-- KEYS[1] lock key; ARGV[1] token. Returns 1 when it is, else 0.
local v = redis.call('GET', KEYS[1])
if not v or string.byte(v, 1) ~= 28 then
  return 0
end
local s = redis.call('ZSCORE', KEYS[1] .. '\31r', ARGV[1])
if s and tonumber(s) > now_ms() then
  return 1
end
return 0
