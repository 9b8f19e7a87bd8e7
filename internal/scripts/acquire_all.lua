-- Acquire a multi-key lock: set every lock key to our token with a TTL if
-- every one is free for us (absent, a session lock whose session has ended:
-- lib.lua), all in one step, so that a node admits a multi-key lock whole or
-- not at all. A key handed to a waiter of Lock (lib.lua, hand_off) is taken:
-- a multi-key lock never waits in a line.
-- A copy of a call that already set the keys (a command sent again) finds
-- our token and answers like the first one did: keys that hold our token
-- are not written again (a SET would reset a TTL an extend has lengthened).
-- With fencing, the counter is incremented in the same step, before any
-- key is written (see acquire_fenced.lua): the keys' earlier per-key
-- counters are folded in and deleted.
-- KEYS[1..n] lock keys; fenced: KEYS[n+1] the fence counter, KEYS[n+2..2n+1]
-- the keys' old counters (all in one hash slot); ARGV[1] token; ARGV[2] TTL
-- in milliseconds; ARGV[3] n.
-- Returns 0 when some key is taken; else 1, or, fenced, the counter (>= 1).
if mark(ARGV[1]) then
  return 0 -- a mark is nobody's token (lib.lua)
end
local n = tonumber(ARGV[3])
local fenced = #KEYS > n
local mine, ours = 0, {}
for i = 1, n do
  local o = free_for(KEYS[i], redis.call('GET', KEYS[i]), 4)
  if o == ARGV[1] then
    mine, ours[i] = mine + 1, true
  elseif o then
    return 0
  end
end
local c = 1
if fenced and mine == n then
  return tonumber(redis.call('GET', KEYS[n + 1]) or '0')
elseif fenced then
  c = redis.call('INCR', KEYS[n + 1])
  for i = n + 2, 2 * n + 1 do
    local old = tonumber(redis.call('GET', KEYS[i]) or '')
    if old then
      if old >= c then
        c = old + 1
        redis.call('SET', KEYS[n + 1], c)
      end
      redis.call('DEL', KEYS[i])
    end
  end
end
for i = 1, n do
  if not ours[i] then
    redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[2])
  end
end
return c
