-- A part of lease.lua and gcralease.lua, written into them where a line
-- says "--> nodes.lua" (see include in scripts.go): with KEYS[2], the
-- sorted set of a key's leasing nodes in its hash slot, it records node at
-- nowms (ms), drops the nodes not seen within win ms (a decimal string:
-- without KEYS[2], the script's arguments have none), and sets nodes to
-- the number left (0 without KEYS[2]).
local nodes = 0
if KEYS[2] then
  local w = win + 0
  redis.call('ZADD', KEYS[2], nowms, node)
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', nowms - w)
  nodes = redis.call('ZCARD', KEYS[2])
  redis.call('PEXPIRE', KEYS[2], 2 * w)
end
