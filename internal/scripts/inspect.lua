-- Read a lock key for Client.Inspect, in one atomic step: who holds it, how
-- long it lives, and the fencing counters its next holder's token exceeds.
-- KEYS[1] lock key; KEYS[2] the fencing counter it shares with other keys;
-- KEYS[3] the key's own counter of earlier versions (acquire_fenced.lua).
-- Returns, joined by \31: the TTL in ms (of the session key for a session
-- lock, whose key lives as long as its session; -2 when the key is free),
-- the two counters (each '' when absent, 'x' when not an integer), and,
-- last, the token that holds the key ('' when it is free: absent, a session
-- lock whose session has ended, or handed to a waiter; lib.lua). The token
-- comes last: a value written outside quorumlock may hold any byte. A key
-- with shared holders (acquire_shared.lua) answers \28 and their live
-- tokens, each after a \31, in place of the token.
local function counter(k)
  local c = redis.call('GET', k)
  if not c then
    return ''
  elseif not string.match(c, '^%d+$') then
    return 'x'
  end
  return c
end
local v = redis.call('GET', KEYS[1])
local t, ttl = '', -2
if v and string.byte(v, 1) == 28 then
  ttl = redis.call('PTTL', KEYS[1])
  local live = redis.call('ZRANGEBYSCORE', KEYS[1] .. '\31r', now_ms() + 1, '+inf')
  t = '\28' .. (#live > 0 and '\31' or '') .. table.concat(live, '\31')
elseif v and string.byte(v, 1) ~= 30 then
  t = owner(KEYS[1], v) or ''
  if t == v then
    ttl = redis.call('PTTL', KEYS[1])
  elseif t ~= '' then
    local n = tonumber(string.match(v, '\31(%d+)$'))
    ttl = redis.call('PTTL', string.sub(KEYS[1], 1, n) .. 's:' .. string.sub(v, 1, 16))
  end
end
return ttl .. '\31' .. counter(KEYS[2]) .. '\31' .. counter(KEYS[3]) .. '\31' .. t
