-- Acquire a session lock (lib.lua): set KEYS[1], if it is free, to our token
-- naming the session's current incarnation on this node, and make the
-- session key KEYS[2] live at least the session TTL more (never less: a
-- late acquire must not cut the session short). A session key that is
-- absent is created with a new incarnation from the node's sequence
-- KEYS[3], so that the locks of an earlier incarnation never come back.
-- A copy of a call that already set the key answers like the first one,
-- while that incarnation lives.
-- KEYS[1] lock key; KEYS[2] session key; KEYS[3] incarnation sequence;
-- ARGV[1] token; ARGV[2] session TTL in ms; ARGV[3] the lock key's own TTL
-- in ms (it only collects the key once the session has ended); ARGV[4] the
-- length of the prefix that names the session key; ARGV[5..8] the waiter,
-- if any (lib.lua, line: a waiter of Lock joins the key's line when it is
-- taken, and may take a key handed to it).
-- Returns the incarnation (>= 1) when the key holds our token, 0 when it is
-- taken (not the line's length, as the plain acquire answers: a sequence
-- changed outside quorumlock must not read as "taken").
if mark(ARGV[1]) then
  return 0 -- a mark is nobody's token (lib.lua)
end
local o = free_for(KEYS[1], redis.call('GET', KEYS[1]), 5)
if o and o ~= ARGV[1] then
  line(KEYS[1], 5, false)
  return 0
end
local inc = redis.call('GET', KEYS[2])
if inc then
  redis.call('PEXPIRE', KEYS[2], ARGV[2], 'GT')
else
  inc = tostring(redis.call('INCR', KEYS[3]))
  redis.call('SET', KEYS[2], inc, 'PX', ARGV[2])
end
if not o then
  redis.call('SET', KEYS[1], ARGV[1] .. '\31' .. inc .. '\31' .. ARGV[4], 'PX', ARGV[3])
  line(KEYS[1], 5, true)
end
return tonumber(inc)
