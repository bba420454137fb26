-- Funnel's GCRA on Redis keys: the decision of package gcra (Decide),
-- reproduced bit for bit, for one key or a batch of them. Each key holds
-- redis-cell's format: the theoretical arrival time (TAT) as a decimal count
-- of nanoseconds since the Unix epoch, expiring when the TAT is reached.
--
-- Lua numbers are doubles, exact only to 2^53, and nanosecond epochs (~1.8e18)
-- do not fit. Every time is therefore kept on two limbs, h*1e9 + l with
-- 0 <= l < 1e9 and 0 <= h < 2^34 (seconds and nanoseconds), on which sums,
-- differences and comparisons are exact. No product or quotient of times is
-- computed here: the cost interval*quantity and the tolerance interval*limit
-- come from Go, and Go computes the whole result from what this returns.
--
-- KEYS     the keys, in the order their requests are decided (one key may
--          come more than once: each request sees the ones before it)
-- ARGV[1]  the operation: "t" throttle; "g" get, "d" delete (one key only)
-- ARGV[2]  "" to take the time from Redis's TIME; tests only: now's seconds,
-- ARGV[3]  and now's nanoseconds
-- ARGV[4]  milliseconds added to every expiry (0 except in tests)
-- ARGV[4+4i-3 .. 4+4i], for the i-th key of a throttle: the cost's seconds
--          and nanoseconds, the tolerance's seconds and nanoseconds; or four
--          empty strings when they are those of the key before
--
-- For each key, the answer is its status and d = max(TAT - now, 0), the time
-- to a full bucket before the request, in ns. A throttle's status is 1 if
-- allowed (and written), 0 if refused, 2 if allowed but the new TAT would
-- pass 2^63-1 (nothing written); other operations answer 0. The answer is
-- the integer d*4 + status when d < 2^50, else the pair -1-status, then d's
-- seconds and nanoseconds. A key that holds anything but a decimal TAT within
-- int64 is left as it is and answers -10 (not a decimal number), -11 (beyond
-- int64) or -12 (not a string).
--
-- With one key the reply is that key's answer, and a WRONGTYPE error for a key
-- that holds anything else; with several keys it is the array of their
-- answers, in order.
--
-- The script is on the hot path of every decision, and each call of a C
-- function costs Redis CPU: the common cases take few of them (one pattern
-- match, string-to-number coercion rather than tonumber, a plain integer
-- reply).

local nh, nl
if ARGV[2] == '' then
  local t = redis.call('TIME')
  nh, nl = t[1] + 0, t[2] * 1000
else
  nh, nl = ARGV[2] + 0, ARGV[3] + 0
end
local op = ARGV[1]
local nk = #KEYS
local out = {}
local ch, cl, vh, vl

for i = 1, nk do
  local key = KEYS[i]
  if op == 't' and ARGV[4 * i + 1] ~= '' then
    local a = 4 * i
    ch, cl, vh, vl = ARGV[a + 1] + 0, ARGV[a + 2] + 0, ARGV[a + 3] + 0, ARGV[a + 4] + 0
  end
  local raw = redis.pcall('GET', key)
  local th, tl, bad = 0, 0, 0
  if raw then
    if raw.err then
      bad = 3 -- a list, a hash...: GET's own WRONGTYPE error
    else
      -- Every TAT from 2001 to 2286 has 19 digits: one match splits it.
      local h, l = string.match(raw, '^([1-9]%d%d%d%d%d%d%d%d%d)(%d%d%d%d%d%d%d%d%d)$')
      if h then
        th, tl = h + 0, l + 0
      else
        -- Other lengths, a '+' or leading zeros (Rust's u64 parser, which
        -- redis-cell uses, takes both), or no number at all.
        local d = string.match(raw, '^%+?0*(%d*)$')
        if not d or not string.find(raw, '%d') then
          bad = 1
        else
          local n = #d
          if n > 19 then
            bad = 2
          elseif n > 9 then
            th, tl = string.sub(d, 1, n - 9) + 0, string.sub(d, n - 8) + 0
          elseif n > 0 then
            tl = d + 0
          end
        end
      end
      if th > 9223372036 or (th == 9223372036 and tl > 854775807) then
        bad = 2
      end
    end
  end

  if bad > 0 then
    if nk == 1 then
      if bad == 1 then
        return redis.error_reply('WRONGTYPE the value is not a decimal number')
      elseif bad == 2 then
        return redis.error_reply('WRONGTYPE the value is beyond int64 nanoseconds')
      end
      return redis.error_reply('WRONGTYPE the value is not a string')
    end
    out[#out + 1] = -9 - bad
  else
    -- d = max(TAT - now, 0)
    local dh, dl = 0, 0
    if th > nh or (th == nh and tl > nl) then
      dh, dl = th - nh, tl - nl
      if dl < 0 then
        dh, dl = dh - 1, dl + 1000000000
      end
    end

    local status = 0
    if op == 't' then
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
            -- Expire when the TAT is reached, in whole milliseconds rounded
            -- up, so that the key never vanishes while its TAT is ahead.
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
            redis.call('SET', key, v, 'PX', ms + ARGV[4])
          end
        end
      end
    elseif op == 'd' and raw then
      redis.call('DEL', key)
    end

    if dh < 1125899 then
      if nk == 1 then
        return (dh * 1000000000 + dl) * 4 + status
      end
      out[#out + 1] = (dh * 1000000000 + dl) * 4 + status
    else
      out[#out + 1] = -1 - status
      out[#out + 1] = dh
      out[#out + 1] = dl
    end
  end
end
return out
