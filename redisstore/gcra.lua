-- Funnel's GCRA on one Redis key: the decision of package gcra (Decide),
-- reproduced bit for bit. The key holds redis-cell's format: the theoretical
-- arrival time (TAT) as a decimal count of nanoseconds since the Unix epoch,
-- expiring when the TAT is reached.
--
-- Lua numbers are doubles, exact only to 2^53, and nanosecond epochs (~1.8e18)
-- do not fit. Every value is therefore kept on two limbs, h*1e9 + l with
-- 0 <= l < 1e9 and 0 <= h < 2^34 (seconds and nanoseconds), on which additions,
-- subtractions and comparisons are exact. Every value is a non-negative int64;
-- no product or quotient is ever computed here (the cost interval*quantity and
-- the tolerance come from Go, and so does everything in the result).
--
-- KEYS[1]  the key
-- ARGV[1]  the operation: "t" throttle, "g" get the TAT, "d" delete the key
-- ARGV[2]  now in ns (tests only), or "" for Redis's TIME
-- ARGV[3]  throttle: the cost, interval*quantity, in ns
-- ARGV[4]  throttle: the tolerance, interval*limit, in ns
-- ARGV[5]  throttle: milliseconds added to every expiry (0 except in tests)
--
-- Every operation returns {status, tat, sec, usec}: tat is the key's value as
-- found (false if absent); sec and usec are Redis's TIME when ARGV[2] is "".
-- A throttle's status is 1 if allowed (and written), 0 if refused, 2 if the
-- new TAT would overflow int64 (nothing written); otherwise it is 0.
-- A key holding anything but a decimal TAT within int64 gets a WRONGTYPE error
-- and is left as it is (a key of another type gets Redis's own WRONGTYPE
-- error from GET).

local E9 = 1000000000

-- parse returns the limbs of a decimal string with an optional '+' (what
-- redis-cell accepts); nil if s is not one, false if it exceeds int64.
local function parse(s)
  local d = string.match(s, '^%+?0*(%d*)$')
  if not d or not string.find(s, '%d') then
    return nil
  end
  local n = #d
  if n <= 9 then
    return 0, tonumber(d) or 0
  end
  if n > 19 then
    return false
  end
  local h, l = tonumber(string.sub(d, 1, n - 9)), tonumber(string.sub(d, n - 8))
  if h > 9223372036 or (h == 9223372036 and l > 854775807) then
    return false
  end
  return h, l
end

local key = KEYS[1]
local raw = redis.call('GET', key)
local th, tl
if raw then
  th, tl = parse(raw)
  if th == nil then
    return redis.error_reply('WRONGTYPE the value is not a decimal number')
  elseif not th then
    return redis.error_reply('WRONGTYPE the value is beyond int64 nanoseconds')
  end
end

local nh, nl, sec, usec
if ARGV[2] == '' then
  local t = redis.call('TIME')
  sec, usec = t[1], t[2]
  nh, nl = tonumber(sec), tonumber(usec) * 1000
else
  nh, nl = parse(ARGV[2])
end

local op = ARGV[1]
if op ~= 't' then
  if op == 'd' and raw then
    redis.call('DEL', key)
  end
  return {0, raw, sec, usec}
end

local ch, cl = parse(ARGV[3])
local vh, vl = parse(ARGV[4])

-- base = max(now, tat)
local bh, bl = nh, nl
if raw and (th > nh or (th == nh and tl > nl)) then
  bh, bl = th, tl
end

-- A cost above the tolerance never passes.
if ch > vh or (ch == vh and cl > vl) then
  return {0, raw, sec, usec}
end
-- ttl = base - now + cost, the time to a full bucket after this request;
-- refused if it exceeds the tolerance.
local xh, xl = bh - nh + ch, bl - nl + cl
if xl < 0 then
  xh, xl = xh - 1, xl + E9
elseif xl >= E9 then
  xh, xl = xh + 1, xl - E9
end
if xh > vh or (xh == vh and xl > vl) then
  return {0, raw, sec, usec}
end
-- The new TAT, base + cost, must fit in an int64 (2^63-1 = 9223372036*1e9 + 854775807).
local zh, zl = bh + ch, bl + cl
if zl >= E9 then
  zh, zl = zh + 1, zl - E9
end
if zh > 9223372036 or (zh == 9223372036 and zl > 854775807) then
  return {2, raw, sec, usec}
end

if xh == 0 and xl == 0 then
  -- The new TAT is now: the same state as an absent key.
  if raw then
    redis.call('DEL', key)
  end
else
  -- Expire when the TAT is reached, in whole milliseconds rounded up, so that
  -- the key never disappears while its TAT is still ahead of Redis's clock.
  local ms = xh * 1000 + math.floor(xl / 1000000)
  if xl % 1000000 > 0 then
    ms = ms + 1
  end
  local v
  if zh > 0 then
    v = string.format('%d%09d', zh, zl)
  else
    v = string.format('%d', zl)
  end
  redis.call('SET', key, v, 'PX', string.format('%d', ms + tonumber(ARGV[5])))
end
return {1, raw, sec, usec}
