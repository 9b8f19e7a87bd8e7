-- Leave a key's line (lib.lua): a waiter of Lock that stops waiting, or
-- that took the lock without this node, takes its entry out of the line;
-- if the key was handed to it here, it hands the key on to the next waiter
-- (or leaves it free). A waiter that stops waiting tells the next one, like
-- a release does (the message names no released token: it is \31 and the
-- next waiter); one that took the lock does not: its release will.
-- The waiter leaves for good: its attempts that land within ARGV[3] ms do
-- not put it back (lib.lua, leave).
-- KEYS[1] lock key; ARGV[1] waiter; ARGV[2] the grace in ms of a hand-off;
-- ARGV[3] how long the waiter stays out, in ms; ARGV[4] '1' to tell the
-- next waiter.
-- Returns 1 when the key had been handed to the waiter, else 0.
leave(KEYS[1], ARGV[1], ARGV[3])
if redis.call('GET', KEYS[1]) ~= '\30' .. ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
local w = hand_off(KEYS[1], ARGV[2])
if w ~= '' and ARGV[4] == '1' then
  tell(KEYS[1], '\31' .. w, w)
end
return 1
