-- Extend a lock: set a new TTL on KEYS[1] only while it holds our token.
-- Never creates the key: a lock that expired stays lost.
-- KEYS[1] lock key; ARGV[1] token; ARGV[2] new TTL in milliseconds.
-- Returns 1 when the TTL was set, 0 otherwise (absent, expired, or held by
-- another token: left untouched).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
