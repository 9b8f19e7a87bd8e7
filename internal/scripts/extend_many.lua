-- Extend many locks at once, with the rules of extend.lua for each: make
-- KEYS[i] live at least ARGV[1] ms more, only while it holds ARGV[i+1];
-- never create a key, never shorten a TTL (a renewal that lands late, after
-- a later one, must not cut a key below its holder's deadline). A session
-- lock's key (lib.lua) is extended while it names its token.
-- KEYS[1..n] lock keys; ARGV[1] new TTL in milliseconds; ARGV[2..n+1] tokens.
-- Returns a string of n characters: '1' where the key holds its token (its
-- TTL is now >= ARGV[1] ms), '0' where it does not (left untouched).
-- PEXPIRE ... GT (Redis 7.0) sets the TTL only when it is longer than the
-- one left: one call per key fewer than PTTL and then PEXPIRE.
local ttl = ARGV[1]
local out = {}
for i, k in ipairs(KEYS) do
  local v = redis.call('GET', k)
  if v and not mark(ARGV[i + 1]) and names(v, ARGV[i + 1]) then
    redis.call('PEXPIRE', k, ttl, 'GT')
    out[i] = '1'
  else
    out[i] = '0'
  end
end
return table.concat(out)
