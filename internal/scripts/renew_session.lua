-- Renew a session (lib.lua): make the session key KEYS[1] live at least
-- ARGV[2] ms more, only while it holds incarnation ARGV[1]. Never creates
-- it and never shortens it: a renewal that lands late is harmless.
-- KEYS[1] session key; ARGV[1] incarnation; ARGV[2] TTL in milliseconds.
-- Returns 1 when the session key holds the incarnation, 0 when it does not
-- (that incarnation has ended on this node, for good).
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2], 'GT')
return 1
