-- One take of a fixed window of a fixed period (not a calendar's) or of a
-- sliding window counter, without a ban: family.lua's inline path for
-- them, as a script of its own, whose arguments and reply are short. What
-- Redis spends on a call is its arguments, the commands and C functions
-- the script calls, and the numbers of its reply (about a thousand Redis
-- instructions each), more than the decision: family.lua's call takes 13
-- arguments and two keys (the ban's) and answers 8 numbers. Any key that
-- does not hold a window of the op's kind, as family.lua writes it, goes
-- to family.lua (which reads another algorithm's empty state as absent,
-- and answers WRONGTYPE for the rest): this answers { -1 } and changes
-- nothing.
--
-- KEYS[1]  the key
-- ARGV     now's seconds and nanoseconds ('' or '-' and a deadline, see
--          now.lua), milliseconds added to the expiry (tests only), the
--          algorithm (f or s), the quantity, the count, the period in ms
--
-- Reply: now's seconds and nanoseconds, then n*4 + status (n the units
-- the fixed window counts before the take, or the sliding window's
-- current count; status 1 allowed and written, 0 refused), and for the
-- sliding window the previous window's count. The window's start (and a
-- fixed window's end) follow from now and the period, as here.

local nh, nl
local ti = 1
--> now.lua
local key = KEYS[1]
local raw = redis.pcall('GET', key)
if type(raw) == 'table' then
  return { -1 }
end
local slack, q, count, p = ARGV[3] + 0, ARGV[5] + 0, ARGV[6] + 0, ARGV[7] + 0
local nowms = nh * 1000 + (nl - nl % 1000000) / 1000000
local s = nowms - nowms % p
if ARGV[4] == 'f' then
  local e = s + p
  local n = 0
  if raw then
    local fs, fe, fn = string.match(raw, '^F(%d+):(%d+):(%d+)$')
    if not fs then
      return { -1 }
    elseif fe + 0 > nowms and fs + 0 >= s then
      -- (a later window's: the clock was stepped back)
      n = fn + 0
    end
  end
  if n >= 1125899906842624 then
    return { -1 }
  end
  if n + q > count then
    return { nh, nl, n * 4 }
  end
  if q > 0 then
    redis.call('PSETEX', key, string.format('%d', e - nowms + slack), string.format('F%d:%d:%d', s, e, n + q))
  end
  return { nh, nl, n * 4 + 1 }
end

local prev, cur = 0, 0
if raw then
  local ss, sp, sprev, scur = string.match(raw, '^S(%d+):(%d+):(%d+):(%d+)$')
  if not ss then
    return { -1 }
  end
  ss, sp, sprev, scur = ss + 0, sp + 0, sprev + 0, scur + 0
  local at = 0
  if scur > 0 then
    at = ss + 2 * sp
  elseif sprev > 0 then
    at = ss + sp
  end
  if at > nowms then
    if ss >= s then
      -- (or a later window's: the clock was stepped back)
      prev, cur = sprev, scur
    elseif ss == s - p then
      prev = scur
    end
  end
end
if cur >= 1125899906842624 then
  return { -1 }
end
local el = nowms - s
-- ceil(prev·(p−el)/p): below 2^53, as Go bounds (count+1)·p
local w = prev * (p - el) + p - 1
local est = cur + (w - w % p) / p
if est + q > count then
  return { nh, nl, cur * 4, prev }
end
if q > 0 then
  redis.call('PSETEX', key, string.format('%d', s + 2 * p - nowms + slack), string.format('S%d:%d:%d:%d', s, p, prev, cur + q))
end
return { nh, nl, cur * 4 + 1, prev }
