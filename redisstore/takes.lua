-- Takes under several limits at once, all or nothing (a funnel, a delaying
-- bucket, a fixed window, of a fixed period or a calendar's, a sliding
-- window counter), none with a ban: family.lua's decision for them, as a
-- script of its own, whose arguments and reply are short (see window.lua
-- for why that counts: family.lua takes nine to thirteen arguments and two
-- keys a take, and answers six numbers; here it is four or five, one key,
-- and one number, two for a sliding counter or a TAT far ahead). Each take is decided as family.lua's one take is
-- inline, in order; when all are admitted, those of a quantity above 0 are
-- written, else none. A key that does not hold a state of its take's kind
-- as family.lua writes it, or a calendar window that does not hold Redis's
-- now, answers -1 before anything is written: family.lua decides the call.
--
-- KEYS     the keys, one per take (distinct: funnel.CheckOps)
-- ARGV     now's seconds and nanoseconds ('' or '-' and a deadline, see
--          now.lua), milliseconds added to every expiry (tests only), then
--          per take: the algorithm, the quantity and
--            g l:  the cost and the tolerance in ns (below 2^53)
--            f s:  the count, the period in ms
--            d:    (a calendar's fixed window) the count, the window's
--                  start and end in ms, as this machine's clock places it
--
-- Reply: now's seconds and nanoseconds, then per take its status (1
-- admitted, 0 refused, 2 a TAT beyond int64) and the state it found, as
-- family.lua answers it, in as few numbers as Go needs (the rest follows
-- from now and the limit):
--   g l:  d*4 + status, d = max(TAT - now, 0) in ns, when d < 2^50; else
--         -1 - status, then d's seconds and nanoseconds
--   f d:  n*4 + status, n the units the window held
--   s:    cur*4 + status, then prev (the current and previous windows'
--         units)
-- or now's and -1.

local nh, nl
--> fns.lua
local ti = 1
--> now.lua
local slack = ARGV[3] + 0
local nowms = nh * 1000 + (nl - nl % 1000000) / 1000000
local nk = #KEYS
local out, no = { nh, nl }, 2
local all = true
-- per take, what its write needs: its algorithm, its quantity, whether
-- its key was found, and four numbers, at 7i-6 to 7i
local W = {}
local a = 4
for i = 1, nk do
  local key, alg, q = KEYS[i], ARGV[a], ARGV[a + 1] + 0
  local raw = redis.pcall('GET', key)
  if type(raw) == 'table' then
    return { nh, nl, -1 }
  end
  local st, w = 0, 7 * i - 7
  W[w + 1], W[w + 2], W[w + 3] = alg, q, raw
  if alg == 'g' or alg == 'l' then
    local th, tl, bad = 0, 0, false
    if raw then
      --> tat.lua
    end
    if bad then
      return { nh, nl, -1 }
    end
    local c, v = ARGV[a + 2] + 0, ARGV[a + 3] + 0
    local ch, vh = (c - c % 1000000000) / 1000000000, (v - v % 1000000000) / 1000000000
    local cl, vl = c - ch * 1000000000, v - vh * 1000000000
    --> decide.lua
    st = status
    W[w + 4], W[w + 5], W[w + 6], W[w + 7] = th, tl, xh, xl
    if dh < 1125899 then
      out[no + 1], no = (dh * 1000000000 + dl) * 4 + status, no + 1
    else
      out[no + 1], out[no + 2], out[no + 3], no = -1 - status, dh, dl, no + 3
    end
    a = a + 4
  elseif alg == 's' then
    local count, p = ARGV[a + 2] + 0, ARGV[a + 3] + 0
    local prev, cur, ok = 0, 0, true
    local s = nowms - nowms % p
    --> slidingread.lua
    if not ok then
      return { nh, nl, -1 }
    end
    local el = nowms - s
    -- ceil(prev·(p−el)/p): below 2^53, as Go bounds (count+1)·p
    local x = prev * (p - el) + p - 1
    if cur + (x - x % p) / p + q <= count then
      st = 1
    end
    W[w + 4], W[w + 5], W[w + 6], W[w + 7] = s, p, prev, cur + q
    out[no + 1], out[no + 2], no = cur * 4 + st, prev, no + 2
    a = a + 4
  else -- 'f' or 'd'
    local count, s, e = ARGV[a + 2] + 0, 0, 0
    if alg == 'f' then
      local period = ARGV[a + 3] + 0
      s = nowms - nowms % period
      e = s + period
      a = a + 4
    else
      s, e = ARGV[a + 3] + 0, ARGV[a + 4] + 0
      if nowms < s or nowms >= e then
        return { nh, nl, -1 }
      end
      a = a + 5
    end
    local n, ok = 0, true
    --> fixedread.lua
    if not ok then
      return { nh, nl, -1 }
    end
    if n + q <= count then
      st = 1
    end
    W[w + 4], W[w + 5], W[w + 6] = s, e, n + q
    out[no + 1], no = n * 4 + st, no + 1
  end
  if st ~= 1 then
    all = false
  end
end

if all then
  -- The last value and expiry written, as strings (see store.lua).
  local wh, wl, wv, wms, wpx
  for i = 1, nk do
    local w = 7 * i - 7
    if W[w + 2] > 0 then
      local key, alg = KEYS[i], W[w + 1]
      if alg == 'g' or alg == 'l' then
        local raw, th, tl, xh, xl = W[w + 3], W[w + 4], W[w + 5], W[w + 6], W[w + 7]
        --> store.lua
      elseif alg == 's' then
        redis.call('PSETEX', key, string.format('%d', W[w + 4] + 2 * W[w + 5] - nowms + slack), string.format('S%d:%d:%d:%d', W[w + 4], W[w + 5], W[w + 6], W[w + 7]))
      else
        redis.call('PSETEX', key, string.format('%d', W[w + 5] - nowms + slack), string.format('F%d:%d:%d', W[w + 4], W[w + 5], W[w + 6]))
      end
    end
  end
end
return out
