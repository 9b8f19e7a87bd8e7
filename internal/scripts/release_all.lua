-- Release a multi-key lock: delete each of KEYS that holds our token, hand
-- it to the first waiter of its line when asked to (lib.lua, hand_off) and
-- tell waiters that it is free (lib.lua, tell), as release.lua does for one
-- key: a waiter of Lock for one of the keys is served in its turn. Keys
-- that hold another token are left untouched. (A multi-key lock is never a
-- session lock: its keys hold exactly its token.)
-- KEYS lock keys; ARGV[1] token; ARGV[2] the grace in ms a waiter a key is
-- handed to gets (absent or 0: no hand-off).
-- Returns 1 when every key held our token (all are deleted now), else 0
-- (the keys that held it are deleted all the same).
if mark(ARGV[1]) then
  return 0 -- a mark is nobody's token (lib.lua)
end
local all = 1
for _, k in ipairs(KEYS) do
  if redis.call('GET', k) == ARGV[1] then
    redis.call('DEL', k)
    let_go(k, ARGV[1], ARGV[2])
  else
    all = 0
  end
end
return all
