-- Whether the token is a live shared holder of the lock key
-- (acquire_shared.lua). Writes nothing.
-- KEYS[1] lock key; ARGV[1] token. Returns 1 when it is, else 0.
local s, now = place(KEYS[1], ARGV[1])
if s and s > now then
  return 1
end
return 0
