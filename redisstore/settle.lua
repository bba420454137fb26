-- A part of family.lua, written into it where a line says "--> settle.lua"
-- (see include in scripts.go), before the ops are parsed: a reservation's
-- call (see reserve.go).
--
-- Kind 'v' reserves: a take of the estimate whose admission records the
-- reservation under KEYS[3] (see record.lua), unless a live reservation
-- holds that key already: then it answers { now's seconds, nanoseconds,
-- -2 } and changes nothing.
--
-- Kind 'e' settles reservation KEYS[3] at the actual units ARGV[6],
-- ARGV[7] (on two limbs): it reads the record and makes, from the record's
-- limit, the op that the general path then applies, into A (the general
-- path's arguments, ARGV for every other call): a charge of what the
-- actual exceeds the estimate by, or a charge of 0 (a peek) after
-- giveback.lua has given back what the estimate exceeds the actual by
-- (gh, gl). A reservation that is absent, or whose TTL has ended at now,
-- answers { now's seconds, nanoseconds, -1 }; a key that holds anything
-- else than a record, -3 for -1.
--
-- A record is one line of numbers, then the limit (funnel.EncodeLimit):
-- "<settled: 0 or 1> <actual s: 10 digits> <actual ns: 9 digits>
-- <end s> <end ns> <ms> <estimate s> <estimate ns> <interval s>
-- <interval ns> <algorithm> <ban s> <ban ns> <parameters>\n<limit>",
-- amounts on two limbs (s: the quotient by 10^9, ns: the remainder), and
-- the parameters of the algorithm as the take's (g l: the tolerance, then
-- the TAT the take left; f s o: count and period, and for a calendar's
-- fixed window four spans: the take's three and the next) but for the cost
-- of a funnel's op, which is the interval times its units.
local A, settle = ARGV, ARGV[5] == 'e'
local limit, again, ah, al, eh, el, ih, il, gh, gl, sm, mul, rth, rtl
if ARGV[5] == 'v' then
  -- An id that a live reservation of the key holds is refused:
  -- { now's seconds, nanoseconds, -2 }.
  local rec = redis.call('GET', KEYS[3])
  if rec then
    local uh, ul = string.match(rec, '^[01] %d+ %d+ (%d+) (%d+) ')
    if not uh or less(nh, nl, uh + 0, ul + 0) then
      return { nh, nl, -2 }
    end
  end
elseif settle then
  local rec = redis.call('GET', KEYS[3])
  if not rec then
    return { nh, nl, -1 }
  end
  local flag, h1, l1, rest, uh, ul, alg, bh, bl, p1, p2, spans
  flag, h1, l1, rest = string.match(rec, '^([01]) (%d+) (%d+) (.*)$')
  if rest then
    uh, ul, sm, eh, el, ih, il, alg, bh, bl, p1, p2, spans, limit = string.match(rest,
      '^(%d+) (%d+) (%d+) (%d+) (%d+) (%d+) (%d+) (%a) (%d+) (%d+) (%d+) (%d+)([^\n]*)\n(.*)$')
  end
  if not limit then
    -- not a record of ours
    return { nh, nl, -3 }
  end
  if not less(nh, nl, uh + 0, ul + 0) then
    -- its TTL has ended (a test clock ahead of Redis's expiry)
    return { nh, nl, -1 }
  end
  -- mul returns a × b on two limbs, exactly, or false past 2^63 - 1: in
  -- digits of 10^6 (four for each), whose products and their sums stay
  -- exact in a double.
  mul = function(xh, xl, yh, yl)
    local x0, y0 = xl % 1000000, yl % 1000000
    local x1, y1 = (xl - x0) / 1000000 + xh % 1000 * 1000, (yl - y0) / 1000000 + yh % 1000 * 1000
    local xt, yt = (xh - xh % 1000) / 1000, (yh - yh % 1000) / 1000
    local x2, y2 = xt % 1000000, yt % 1000000
    local x3, y3 = (xt - x2) / 1000000, (yt - y2) / 1000000
    if x1 * y3 + x2 * y2 + x3 * y1 + x2 * y3 + x3 * y2 + x3 * y3 > 0 then
      return false -- 10^24 or more
    end
    local c0 = x0 * y0
    local r = c0 % 1000000
    local c1 = x0 * y1 + x1 * y0 + (c0 - r) / 1000000
    c0 = r
    r = c1 % 1000000
    local c2 = x0 * y2 + x1 * y1 + x2 * y0 + (c1 - r) / 1000000
    c1 = r
    r = c2 % 1000000
    local c3 = x0 * y3 + x1 * y2 + x2 * y1 + x3 * y0 + (c2 - r) / 1000000
    c2 = r
    if c3 >= 1000000 then
      return false
    end
    r = c1 % 1000
    local h, l = (c1 - r) / 1000 + c2 * 1000 + c3 * E9, c0 + r * 1000000
    if h > 9223372036 or (h == 9223372036 and l > 854775807) then
      return false
    end
    return h, l
  end
  again = flag == '1'
  if alg == 'g' or alg == 'l' then
    -- the TAT the take left (absent from an older record: no bound)
    rth, rtl = string.match(spans, '^ (%d+) (%d+)$')
    if rth then
      rth, rtl = rth + 0, rtl + 0
    end
  end
  sm, eh, el, ih, il = sm + 0, eh + 0, el + 0, ih + 0, il + 0
  if again then
    ah, al = h1 + 0, l1 + 0
  else
    ah, al = ARGV[6] + 0, ARGV[7] + 0
  end
  local q, ch, cl = 0, 0, 0
  if not again and less(eh, el, ah, al) then
    -- a charge of the difference
    local dh, dl = sub(ah, al, eh, el)
    if alg == 'g' or alg == 'l' then
      q, ch, cl = 1, mul(ih, il, dh, dl)
      if not ch then
        -- beyond any TAT: the charge answers that it does not fit
        ch, cl = 9223372037, 0
      end
    else
      q = dh * E9 + dl
      if alg == 'o' and q > p1 + 1 then
        -- a log keeps count+1 entries of a charge at most
        q = p1 + 1
      end
    end
  elseif not again and less(ah, al, eh, el) then
    gh, gl = sub(eh, el, ah, al)
  end
  A = { '', '', '', '', 'c', alg, q, bh, bl }
  if alg == 'g' or alg == 'l' then
    A[10], A[11], A[12], A[13] = ch, cl, p1, p2
  else
    A[10], A[11] = p1, p2
    if alg == 'f' and p2 == '0' then
      -- the three spans around now: the take's, or the next three
      local sp = {}
      for w in string.gmatch(spans, '%d+') do
        sp[#sp + 1] = w
      end
      local j = 1
      if sp[8] and nowms >= sp[5] + 0 then
        j = 3
      end
      for k = 0, 5 do
        A[12 + k] = sp[j + k]
      end
    end
  end
end
