-- Release a lock: delete KEYS[1] only while it holds our token, then tell
-- waiters on the channel named after the key that it is free (the message
-- is the released token, so that a waiter can count the nodes of one
-- release). The notice is best effort (redis.pcall): an ACL user without
-- pub/sub permissions (the Redis 7 default for new users) gets an error
-- reply to PUBLISH, and the release, already done by then, must not be
-- reported as failed for that; its waiters fall back to polling.
-- A session lock's key is deleted whether or not its session still lives
-- (lib.lua), but counts as released only while it does.
-- KEYS[1] lock key; ARGV[1] token.
-- Returns 1 when the key held our token and was deleted, 0 otherwise
-- (absent, expired, or held by another token: left untouched; or naming
-- our token in a session that has ended: deleted).
local v = redis.call('GET', KEYS[1])
if v and names(v, ARGV[1]) then
  local held = owner(KEYS[1], v) == ARGV[1]
  redis.call('DEL', KEYS[1])
  redis.pcall('PUBLISH', KEYS[1], ARGV[1])
  return held and 1 or 0
end
return 0
