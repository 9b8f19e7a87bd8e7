-- Leave a key's line (lib.lua): a waiter of Lock that stops waiting, or
-- that took the lock without this node, takes its entry out of the line;
-- if the key was handed to it here, it hands the key on to the next waiter
-- (or leaves it free) and tells the waiters, like a release does (the
-- message then names no released token: it is \31 and the next waiter, or
-- empty).
-- KEYS[1] lock key; ARGV[1] waiter; ARGV[2] the grace in ms of a hand-off.
-- Returns 1 when the key had been handed to the waiter, else 0.
leave(KEYS[1], ARGV[1])
if redis.call('GET', KEYS[1]) ~= '\30' .. ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
local w = hand_off(KEYS[1], ARGV[2])
local msg = ''
if w ~= '' then
  msg = '\31' .. w
end
redis.pcall('PUBLISH', KEYS[1], msg)
return 1
