-- Reset and TTL of a key that holds the state of the limiter family beyond
-- the funnel (see family.lua for the formats): it finds the instant the
-- state is empty, and deletes the key for a reset, or for a funnel's
-- decision that found the key holding such a state (an empty state of any
-- algorithm reads as absent, as in family.lua).
--
-- KEYS[1]  the key
-- ARGV     'p' (probe), 'x' (reset) or 'e' (delete if empty at now); now's
--          seconds ('' to read TIME) and nanoseconds
--
-- Reply: now's seconds and nanoseconds, then the ms at which the state is
-- empty (-1 when the key is absent); a key that holds anything else is a
-- WRONGTYPE error.

local nh, nl
if ARGV[2] == '' then
  local t = redis.call('TIME')
  nh, nl = t[1] + 0, t[2] * 1000
else
  nh, nl = ARGV[2] + 0, ARGV[3] + 0
end
local key = KEYS[1]
local t = redis.call('TYPE', key).ok
local empty = -1
if t == 'string' then
  local v = redis.call('GET', key)
  local s, e, n = string.match(v, '^F(%d+):(%d+):(%d+)$')
  if s then
    empty = e + 0
  else
    local s, p, prev, cur = string.match(v, '^S(%d+):(%d+):(%d+):(%d+)$')
    if not s then
      return redis.error_reply('WRONGTYPE funnel: the key holds neither a TAT nor a window')
    end
    s, p = s + 0, p + 0
    if cur + 0 > 0 then
      empty = s + 2 * p
    elseif prev + 0 > 0 then
      empty = s + p
    else
      empty = 0
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
if t ~= 'none' and (op == 'x' or (op == 'e' and empty <= nh * 1000 + (nl - nl % 1000000) / 1000000)) then
  redis.call('DEL', key)
end
return { nh, nl, empty }
