-- Prepended to every script that reads a lock key (scripts.go).
-- A lock key holds a plain token, or a session lock's value:
-- <token> \31 <incarnation> \31 <prefix length>. A session lock is held
-- exactly while its session key holds that incarnation; the session key is
-- <prefix>s:<the token's first 16 bytes>, the prefix being the lock key's
-- first <prefix length> bytes. Tokens never contain \31, so a plain token
-- never reads as a session lock. (docs/safety.md, "Renewal sessions".)

-- owner returns the token that holds lock key k whose value is v: v itself
-- for a plain token, a session lock's token while its session lives, and
-- false when its session has ended (the key is then free). A value that is
-- not exactly a session lock's (as node.ParseSession reads it) is held as
-- it is: only a well-formed session lock is ever freed by its session.
local function owner(k, v)
  local i = string.find(v, '\31', 1, true)
  if not i then
    return v
  end
  local j = string.find(v, '\31', i + 1, true)
  local digits = j and string.match(string.sub(v, j + 1), '^%d+$')
  local n = digits and tonumber(digits)
  if not n or n > #k or i <= 16 or j == i + 1 then
    return v
  end
  local s = string.sub(k, 1, n) .. 's:' .. string.sub(v, 1, 16)
  if redis.call('GET', s) ~= string.sub(v, i + 1, j - 1) then
    return false
  end
  return string.sub(v, 1, i - 1)
end

-- names reports whether value v was written for token t, whether or not
-- its session still lives.
local function names(v, t)
  return v == t or string.sub(v, 1, #t + 1) == t .. '\31'
end

