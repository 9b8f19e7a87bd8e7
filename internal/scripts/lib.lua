-- Prepended to every script that reads a lock key (scripts.go).
-- A lock key holds a plain token, or a session lock's value:
-- <token> \31 <incarnation> \31 <prefix length>. A session lock is held
-- exactly while its session key holds that incarnation; the session key is
-- <prefix>s:<the token's first 16 bytes>, the prefix being the lock key's
-- first <prefix length> bytes. Tokens never contain \31, so a plain token
-- never reads as a session lock. (docs/safety.md, "Renewal sessions".)
-- A key with shared holders holds \28 and the token of the holder that
-- made it shared, which every script reads as taken (no token starts with
-- \28); the shared holders are in <key>\31r (acquire_shared.lua).

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


-- A lock key's line of waiters (docs/design.md, "Hand-off" and "Bounds").
-- <key>\31q ranks the waiters of Lock by their first attempt (µs on the
-- waiter's clock, the same score on every node, so that every node ranks
-- the waiters it knows alike); <key>\31x holds when each of them lapses
-- (ms on this node's clock), so that a waiter that stops asking leaves the
-- line by itself; <key>\31g holds, until they lapse, the waiters that left
-- for good, whose attempts still landing must not put them back. q and x
-- have the same members and are renewed together. A release hands the key
-- to the first live waiter: the key then holds \30 and that waiter for a
-- grace, taken for every acquire but that waiter's. Neither tokens nor
-- waiters contain \28, \30 or \31.
-- Bounds, whatever the key's history: q, x and g hold at most LINE_MAX
-- members each (a waiter that finds the line full waits without a place),
-- the shared holders of a key (acquire_shared.lua) at most SHARED_MAX, each
-- key lives no longer than its longest-lived entry, and one call drops at
-- most PRUNE lapsed entries of a set and reads at most PRUNE of the line's
-- head.
local LINE_MAX = 1000
local SHARED_MAX = 10000
local PRUNE = 8

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- mark reports whether t, a token a client sent, is a value the nodes keep
-- as a mark (a shared key's, a handed key's, a session lock's): such a
-- value is nobody's token, and no script takes it for one.
local function mark(t)
--[fix resumemark
  local b = string.byte(t or '', 1)
  return b == 28 or b == 30 or string.find(t, '\31', 1, true) ~= nil
--]
--[bug resumemark
  return false
--]
end

-- reserved_for reports whether v, a lock key's value, is the key handed to
-- waiter w ('' : no waiter).
local function reserved_for(v, w)
  return w ~= '' and v == '\30' .. w
end

-- live makes key s live at least ttl ms more.
local function live(s, ttl)
  if redis.call('PTTL', s) < tonumber(ttl) then
    redis.call('PEXPIRE', s, ttl)
  end
end

-- prune drops from sorted set s at most PRUNE members whose score, the
-- instant they lapse, is not after now, and the same members from set t
-- when given.
local function prune(s, now, t)
--[fix linegrowth
  local gone = redis.call('ZRANGEBYSCORE', s, '-inf', now, 'LIMIT', 0, PRUNE)
--]
--[bug linegrowth
  local gone = redis.call('ZRANGEBYSCORE', s, '-inf', now)
--]
  if #gone > 0 then
    redis.call('ZREM', s, unpack(gone))
    if t then
      redis.call('ZREM', t, unpack(gone))
    end
  end
end

-- lapsed reports whether member m of sorted set s is absent or lapsed.
local function lapsed(s, m, now)
  return tonumber(redis.call('ZSCORE', s, m) or '0') <= now
end

-- join puts waiter w in the line of k, ranked order unless it is in the
-- line already, and makes its entry, and the line, live ttl ms more. A
-- waiter that left for good (leave with a ttl) stays out: this is an
-- attempt of it that landed late. A full line takes no newcomer.
local function join(k, w, order, ttl)
  local q, x, g = k .. '\31q', k .. '\31x', k .. '\31g'
  local now = now_ms()
  if not lapsed(g, w, now) then
    return
  end
  local new = not redis.call('ZSCORE', q, w)
--[fix linegrowth
  prune(g, now)
  prune(x, now, q)
  if new and redis.call('ZCARD', q) >= LINE_MAX then
    return
  end
--]
  if new then
    redis.call('ZADD', q, order, w)
  end
  redis.call('ZADD', x, now + tonumber(ttl), w)
--[fix linelapse
  live(q, ttl)
  live(x, ttl)
--]
--[bug linelapse
  if new then
    live(q, ttl)
    live(x, ttl)
  end
--]
end

-- leave takes waiter w out of the line of k; for good when ttl is given
-- (its Lock call has ended): for ttl ms its attempts that land late do not
-- put it back (unless g is full: they then lapse by themselves).
local function leave(k, w, ttl)
  local q, x, g = k .. '\31q', k .. '\31x', k .. '\31g'
  redis.call('ZREM', q, w)
  redis.call('ZREM', x, w)
  if not ttl then
    return
  end
  local now = now_ms()
--[fix linegrowth
  prune(g, now)
  if redis.call('ZCARD', g) >= LINE_MAX then
    return
  end
--]
  redis.call('ZADD', g, now + tonumber(ttl), w)
  live(g, ttl)
end

-- waiting reports whether a live waiter of Lock is in the line of k, and
-- drops at most PRUNE lapsed entries. A key nobody waits for costs one
-- read.
local function waiting(k)
  local x = k .. '\31x'
  if redis.call('EXISTS', x) == 0 then
    return false
  end
  local now = now_ms()
  prune(x, now, k .. '\31q')
  return #redis.call('ZRANGEBYSCORE', x, '(' .. now, '+inf', 'LIMIT', 0, 1) > 0
end

-- hand_off reserves k, just freed, for the first live waiter of its line
-- for grace ms, drops the lapsed ones it reads at the line's head, and
-- returns the waiter ('' when no live waiter is among the first PRUNE: k
-- stays free, and the waiters' polls take it). A key nobody waits for
-- costs one read.
local function hand_off(k, grace)
  if not waiting(k) then
    return ''
  end
  local q, x = k .. '\31q', k .. '\31x'
  local now = now_ms()
  for _, w in ipairs(redis.call('ZRANGE', q, 0, PRUNE - 1)) do
    if not lapsed(x, w, now) then
      redis.call('SET', k, '\30' .. w, 'PX', grace)
      return w
    end
    redis.call('ZREM', q, w)
    redis.call('ZREM', x, w)
  end
  return ''
end

-- tell publishes msg, a release's message about k: on the channel of the
-- Client of waiter w when the key was handed to w (k \31 w and the part of
-- w before its first '.', which names its Client), so that only that Client
-- reads it; else (w '' or naming no Client) on k's own channel, which every
-- waiting Client reads. Best effort (see release.lua).
local function tell(k, msg, w)
  local d = string.find(w, '.', 1, true)
  local ch = k
  if d then
    ch = k .. '\31w' .. string.sub(w, 1, d - 1)
  end
  redis.pcall('PUBLISH', ch, msg)
end

-- line settles the line of k for an acquire whose waiter arguments start
-- at ARGV[i]: waiter ('' or absent: none), rank, entry TTL in ms, and '1'
-- when the waiter may be in the line already. A waiter told "taken" joins
-- the line; one that took the key leaves it. It returns the number of
-- waiters in the line after a waiter joined it, else 0: the plain acquire
-- told "taken" answers its negative, so that a Client learns whether the
-- line holds waiters other than its own.
local function line(k, i, won)
  local w = ARGV[i]
  if not w or w == '' then
    return 0
  end
  if not won then
    join(k, w, ARGV[i + 1], ARGV[i + 2])
    return redis.call('ZCARD', k .. '\31q')
  elseif ARGV[i + 3] == '1' then
    leave(k, w)
  end
  return 0
end

-- free_for reads v, the value of lock key k, for an acquire whose waiter
-- is ARGV[i]: false when k is free for it (absent, a session lock whose
-- session ended, or handed to that waiter), else the token that holds it.
local function free_for(k, v, i)
  if not v or reserved_for(v, ARGV[i] or '') then
    return false
  end
  return owner(k, v)
end

-- let_go tells that lock key k, just deleted, is free: it hands k to the
-- first waiter of its line for grace ms when grace is given and positive
-- (hand_off), then tells the waiters (tell) with msg, the released token,
-- followed by \31 and the waiter when it was handed to one. It returns
-- that waiter, or ''. With named, a hand-off's msg is \28 and the waiter
-- instead: the last shared holder's release (release_shared.lua) names the
-- same release on every node that way, whichever holder made the key
-- shared there, so that the waiter's Client counts a quorum of them.
local function let_go(k, msg, grace, named)
  local w = ''
  if tonumber(grace or '0') > 0 then
    w = hand_off(k, grace)
    if w ~= '' then
      if named then
        msg = '\28' .. w
      end
      msg = msg .. '\31' .. w
    end
  end
  tell(k, msg, w)
  return w
end

-- place reads the place of shared holder t on lock key k
-- (acquire_shared.lua): the instant it lapses (ms on this node's clock),
-- this node's time and k's value; false when k has no shared holders or t
-- is not among them.
local function place(k, t)
  local v = redis.call('GET', k)
  if not v or string.byte(v, 1) ~= 28 then
    return false
  end
  local s = redis.call('ZSCORE', k .. '\31r', t)
  if not s then
    return false
  end
  return tonumber(s), now_ms(), v
end
