-- Release a lock: delete KEYS[1] only while it holds our token, hand it to
-- the first waiter of its line when asked to (lib.lua, hand_off), then tell
-- waiters that it is free (lib.lua, tell: on the channel named after the
-- key, or on that waiter's Client's channel of the key). The message
-- is the released token, followed by \31 and the waiter it was handed to,
-- if any: a waiter counts the nodes of one release, and only the waiter
-- named tries. The notice is best effort (redis.pcall): an ACL user without
-- pub/sub permissions (the Redis 7 default for new users) gets an error
-- reply to PUBLISH, and the release, already done by then, must not be
-- reported as failed for that; its waiters fall back to polling.
-- A session lock's key is deleted whether or not its session still lives
-- (lib.lua), but counts as released only while it does.
-- KEYS[1] lock key; ARGV[1] token; ARGV[2] the grace in ms a waiter the key
-- is handed to gets (absent or 0: no hand-off); ARGV[3], if given, the
-- waiter that took the lock, which leaves the line for good (lib.lua,
-- leave) for ARGV[4] ms.
-- Returns 1 when the key held our token and was deleted, 0 otherwise
-- (absent, expired, or held by another token: left untouched; or naming
-- our token in a session that has ended: deleted). When it handed the key
-- to a waiter, it returns that as a string, followed by \31 and the
-- waiter.
if mark(ARGV[1]) then
  return 0 -- a mark is nobody's token (lib.lua)
end
if ARGV[3] then
  leave(KEYS[1], ARGV[3], ARGV[4])
end
local v = redis.call('GET', KEYS[1])
local held, w = 0, ''
if v and names(v, ARGV[1]) then
  if owner(KEYS[1], v) == ARGV[1] then
    held = 1
  end
  redis.call('DEL', KEYS[1])
  w = let_go(KEYS[1], ARGV[1], ARGV[2])
end
if w ~= '' then
  return held .. '\31' .. w
end
return held
