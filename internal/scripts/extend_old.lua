-- The extend script before the late-landings fix (commit d3a86f9), with
-- lib.lua's names() for session locks: it sets the key's TTL to ARGV[2]
-- ms whatever it was, so a late extend can shorten a later, longer one.
-- Built only with -tags quorumlock_oldextend (extend_old.go), for the
-- simulator's control run. KEYS[1] lock key; ARGV[1] token; ARGV[2] TTL ms.
local v = redis.call('GET', KEYS[1])
if v and names(v, ARGV[1]) then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
