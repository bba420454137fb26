-- Reset and TTL of any key of the store: a funnel's TAT (redis-cell's
-- format, read by tat.lua) or the state of another algorithm of the family
-- (see family.lua for the formats). It finds when the state is empty, and
-- deletes the key for a reset, or for a funnel's decision that found the
-- key holding another algorithm's state ('e': deleted only if that state is
-- empty, as family.lua reads an empty state as absent).
--
-- KEYS[1]  the key; KEYS[2], when given, the copy of its rate shares'
--          fence (see share.lua), which a reset keeps in the key while
--          it is ahead
-- ARGV     'p' (probe), 'x' (reset) or 'e' (delete if empty at now); now's
--          seconds ('' to read TIME; '-' with a deadline, see now.lua) and
--          nanoseconds (or the deadline)
--
-- Reply: now's seconds and nanoseconds, then the ms at which the state is
-- empty (-1 when the key is absent), or for a TAT -2 and the TAT's seconds
-- and nanoseconds; a key that holds anything else is a WRONGTYPE error, and
-- is left as it is.

local nh, nl
--> fns.lua
local ti = 2
--> now.lua
local key = KEYS[1]
local t = redis.call('TYPE', key).ok
local empty, reply = -1, nil
if t == 'string' then
  local raw = redis.call('GET', key)
  local c = string.sub(raw, 1, 1)
  local s, e, n, p, prev, cur
  local per, off
  if c == 'L' then
    -- a packed log: empty a period (its writer's) after its newest entry
    per, off = string.match(raw, '^L(%d+):()')
    if per and (#raw - off + 1) % 6 ~= 0 then
      per = nil
    end
  end
  if per then
    local total = (#raw - off + 1) / 6
    empty = 0
    if total > 0 then
      empty = struct.unpack('>I6', raw, off + 6 * (total - 1)) + per
    end
  elseif c == 'F' then
    s, e, n = string.match(raw, '^F(%d+):(%d+):(%d+)$')
  elseif c == 'S' then
    s, p, prev, cur = string.match(raw, '^S(%d+):(%d+):(%d+):(%d+)$')
  end
  if per then
    -- (above)
  elseif e then
    empty = e + 0
  elseif p then
    s, p = s + 0, p + 0
    if cur + 0 > 0 then
      empty = s + 2 * p
    elseif prev + 0 > 0 then
      empty = s + p
    else
      empty = 0
    end
  else
    local th, tl, bad = 0, 0, false
    --> tat.lua
    if bad == 1 then
      return redis.error_reply('WRONGTYPE the value is not a decimal number')
    elseif bad then
      return redis.error_reply('WRONGTYPE the value is beyond int64 nanoseconds')
    end
    reply = { nh, nl, -2, th, tl }
    -- empty when the TAT is reached, in whole ms rounded up (for 'e')
    empty = th * 1000 + (tl - tl % 1000000) / 1000000
    if tl % 1000000 > 0 then
      empty = empty + 1
    end
  end
elseif t == 'zset' then
  local m = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if m[1] == '\0log' then
    empty = 0
    if last[2] + 0 >= 0 then
      empty = last[2] - m[2] -- the newest entry plus the period
    end
  elseif m[1] == '\0conc' then
    empty = 0
    if last[2] + 0 >= 0 then
      empty = last[2] + 0
    end
  else
    return redis.error_reply('WRONGTYPE funnel: the sorted set is not a sliding log or leases')
  end
elseif t ~= 'none' then
  return redis.error_reply('WRONGTYPE funnel: the key holds a ' .. t)
end
local op = ARGV[1]
-- A reset of a key leased in rate shares keeps the shares' fence, while it
-- is ahead (see share.lua): the shares' buckets still admit, and a plain
-- decision must wait for them as before.
local fence = false
if op == 'x' and KEYS[2] and (t == 'string' or t == 'none') then
  fence = redis.pcall('GET', KEYS[2])
  local fh, fl
  if type(fence) == 'string' then
    fh, fl = string.match(fence, '^([1-9]%d*)(%d%d%d%d%d%d%d%d%d)$')
  end
  if not fh or #fh > 10 or not (fh + 0 > nh or (fh + 0 == nh and fl + 0 > nl)) then
    fence = false
  end
end
if fence then
  if t ~= 'string' or redis.call('GET', key) ~= fence then
    redis.call('PSETEX', key, math.max(redis.call('PTTL', KEYS[2]), 1), fence)
  end
elseif t ~= 'none' and (op == 'x' or (op == 'e' and empty <= nh * 1000 + (nl - nl % 1000000) / 1000000)) then
  redis.call('DEL', key)
end
return reply or { nh, nl, empty }
