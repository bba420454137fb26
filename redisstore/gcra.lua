-- Funnel's GCRA on one Redis key: the decision of package gcra (Decide),
-- reproduced bit for bit. The key holds redis-cell's format: the theoretical
-- arrival time (TAT) as a decimal count of nanoseconds since the Unix epoch,
-- expiring when the TAT is reached.
--
-- Lua numbers are doubles, exact only to 2^53, and nanosecond epochs (~1.8e18)
-- do not fit. Every time is therefore kept on two limbs, h*1e9 + l with
-- 0 <= l < 1e9 and 0 <= h < 2^34 (seconds and nanoseconds), on which sums,
-- differences and comparisons are exact. No product or quotient of times is
-- computed here: the cost interval*quantity and the tolerance interval*limit
-- come from Go, and Go computes the whole result from what this returns.
--
-- KEYS[1]  the key
-- ARGV[1]  the operation: "t" throttle, "g" get, "d" delete the key
-- ARGV[2]  "" to take the time from Redis's TIME; tests only: now's seconds,
-- ARGV[3]  and now's nanoseconds
-- ARGV[4]  throttle: the cost's seconds,       ARGV[5] and nanoseconds
-- ARGV[6]  throttle: the tolerance's seconds,  ARGV[7] and nanoseconds
-- ARGV[8]  throttle: milliseconds added to every expiry (0 except in tests)
--
-- The reply is the status and d = max(TAT - now, 0), the time to a full
-- bucket before the request, in ns: the integer d*4 + status when d < 2^50,
-- else the array {status, d's seconds, d's nanoseconds}. A throttle's status
-- is 1 if allowed (and written), 0 if refused, 2 if allowed but the new TAT
-- would pass 2^63-1 (nothing written); other operations answer 0.
--
-- A key that holds anything but a decimal TAT within int64 gets a WRONGTYPE
-- error and is left as it is (one of another type gets Redis's own WRONGTYPE
-- error from GET).
--
-- The script is on the hot path of every decision: each call of a C function
-- costs Redis CPU, so the common cases take few of them (no table in the
-- reply, string-to-number coercion instead of tonumber, one pattern match).

local key = KEYS[1]
local raw = redis.call('GET', key)
local th, tl = 0, 0
if raw then
  -- Every TAT from 2001 to 2286 has 19 digits: one match splits it.
  local h, l = string.match(raw, '^([1-9]%d%d%d%d%d%d%d%d%d)(%d%d%d%d%d%d%d%d%d)$')
  if h then
    th, tl = h + 0, l + 0
  else
    -- Other lengths, a '+' or leading zeros (Rust's u64 parser, which
    -- redis-cell uses, takes both), or no number at all.
    local d = string.match(raw, '^%+?0*(%d*)$')
    if not d or not string.find(raw, '%d') then
      return redis.error_reply('WRONGTYPE the value is not a decimal number')
    end
    local n = #d
    if n > 19 then
      return redis.error_reply('WRONGTYPE the value is beyond int64 nanoseconds')
    elseif n > 9 then
      th, tl = string.sub(d, 1, n - 9) + 0, string.sub(d, n - 8) + 0
    elseif n > 0 then
      tl = d + 0
    end
  end
  if th > 9223372036 or (th == 9223372036 and tl > 854775807) then
    return redis.error_reply('WRONGTYPE the value is beyond int64 nanoseconds')
  end
end

local nh, nl
if ARGV[2] == '' then
  local t = redis.call('TIME')
  nh, nl = t[1] + 0, t[2] * 1000
else
  nh, nl = ARGV[2] + 0, ARGV[3] + 0
end

-- d = max(TAT - now, 0)
local dh, dl = 0, 0
if th > nh or (th == nh and tl > nl) then
  dh, dl = th - nh, tl - nl
  if dl < 0 then
    dh, dl = dh - 1, dl + 1000000000
  end
end

local status = 0
local op = ARGV[1]
if op == 't' then
  local ch, cl, vh, vl = ARGV[4] + 0, ARGV[5] + 0, ARGV[6] + 0, ARGV[7] + 0
  -- Allowed iff cost <= tolerance and x = d + cost <= tolerance.
  if ch < vh or (ch == vh and cl <= vl) then
    local xh, xl = dh + ch, dl + cl
    if xl >= 1000000000 then
      xh, xl = xh + 1, xl - 1000000000
    end
    if xh < vh or (xh == vh and xl <= vl) then
      -- The new TAT is max(now, TAT) + cost = now + x; it must fit in an
      -- int64 (2^63-1 = 9223372036*1e9 + 854775807).
      local zh, zl = nh + xh, nl + xl
      if zl >= 1000000000 then
        zh, zl = zh + 1, zl - 1000000000
      end
      if zh > 9223372036 or (zh == 9223372036 and zl > 854775807) then
        status = 2
      elseif xh == 0 and xl == 0 then
        -- The new TAT is now: the same state as an absent key.
        status = 1
        if raw then
          redis.call('DEL', key)
        end
      else
        status = 1
        -- Expire when the TAT is reached, in whole milliseconds rounded up,
        -- so that the key never vanishes while its TAT is still ahead.
        local sub = xl % 1000000
        local ms = xh * 1000 + (xl - sub) / 1000000
        if sub > 0 then
          ms = ms + 1
        end
        local v
        if zh > 0 then
          v = string.format('%d%09d', zh, zl)
        else
          v = string.format('%d', zl)
        end
        redis.call('SET', key, v, 'PX', ms + ARGV[8])
      end
    end
  end
elseif op == 'd' and raw then
  redis.call('DEL', key)
end

if dh < 1125899 then
  return (dh * 1000000000 + dl) * 4 + status
end
return {status, dh, dl}
