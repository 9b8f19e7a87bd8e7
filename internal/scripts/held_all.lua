-- Whether a multi-key lock is held on this node: every one of KEYS holds
-- exactly ARGV[1]. Writes nothing.
-- Returns 1 when it is, else 0.
for _, k in ipairs(KEYS) do
  if redis.call('GET', k) ~= ARGV[1] then
    return 0
  end
end
return 1
