-- A rate share: gcra.Share on a Redis hash kept beside the funnel's key in
-- its hash slot, reproduced bit for bit. Every number of gcra.Share is an
-- integer below 2^53, so doubles compute it exactly; each integer division
-- is written (a - a % b) / b, exact for a, b >= 0 (and the floor for a < 0,
-- where Go's truncation differs: only for a rate k <= 0, which grants
-- nothing either way).
--
-- The hash holds one field per node, whose value is its record as decimal
-- integers separated by spaces: "demand seen start hold k c start hold k c
-- ...", times in microseconds of the allocator's clock (Redis's TIME). It
-- expires when the last of its holds and seens is reached (in whole
-- milliseconds, rounded up). Only the fields that the call changes are
-- written: the caller's, those that lost a reservation, and the nodes that
-- no longer count (deleted).
--
-- The funnel's key itself (redis-cell's format) holds a fence while any
-- reservation is live: a TAT of the latest hold plus the tolerance, which
-- the fence's key (KEYS[3]) keeps too, with the same expiry. Whatever decides
-- the key plainly (a plain store, the redis-cell module, a unit lease)
-- then finds its bucket full, and admits q units only from the latest
-- hold plus q intervals on, once every node's bucket has drained. A TAT
-- after now that is not the fence means that something decided the key
-- plainly since; it would admit on top of new shares, so the script then
-- grants nothing and answers an error that starts with SHAREMIXED. So a
-- fleet that mixes plain decisions with shares (during a rolling change
-- of the mode, say) never admits more than one exact funnel: plain
-- decisions wait for the shares to drain, and shares for the plain
-- decisions' TAT to pass. A fence at the latest hold would do for takes
-- (the nodes' buckets together hold at most (hold - t)/T units at t); the
-- tolerance on top is a margin, for a refund of up to B+1 units made
-- through a plain client and for Redis's rounding of expiries.
--
-- KEYS[1]  the funnel's key (its fence), KEYS[2] its shares hash, KEYS[3]
--          the fence's copy
-- ARGV[1]  "s"
-- ARGV[2]  "" to take the time from Redis's TIME; tests only: now's seconds,
-- ARGV[3]  and now's nanoseconds (see now.lua)
-- ARGV[4]  milliseconds added to the expiry (0 except in tests)
-- ARGV[5]  the interval T in ns, ARGV[6] the tolerance in ns, ARGV[7] the
--          limit (burst + 1)
-- ARGV[8]  the caller's node name, ARGV[9] its demand in parts of the rate
--          (-1: not measured), ARGV[10] the lifetime in µs, ARGV[11] the
--          grace in µs, ARGV[12] the level (units) its older grants keep
--          within
--
-- Reply: { now, start, end, hold, k, c }, in µs and parts (see
-- gcra.ShareGrant). A funnel's key that holds anything but a TAT, a shares
-- key that is not a hash, or a field that is not a node's record is a
-- WRONGTYPE error, and nothing is changed.

local nh, nl
--> fns.lua
local ti = 2
--> now.lua
local key = KEYS[1]
local th, tl = 0, 0
--> get.lua
local clock = nh * 1000000 + (nl - nl % 1000) / 1000
local now = clock
local sk = KEYS[2]
local slack = ARGV[4] + 0
local interval, tol, limit = ARGV[5] + 0, ARGV[6] + 0, ARGV[7] + 0
local node, dem, life, grace, level = ARGV[8], ARGV[9] + 0, ARGV[10] + 0, ARGV[11] + 0, ARGV[12] + 0
local P = 1048576 -- gcra.ShareParts

local all = redis.pcall('HGETALL', sk)
if all.err then
  return redis.error_reply('WRONGTYPE the shares are not a hash')
end
-- Each node's record as numbers: { demand, seen, start, hold, k, c, ... }.
-- The commonest records, of one or two reservations, are read by one
-- match (Lua's patterns cost per byte scanned: a record of two
-- reservations read by one match costs about a third of a scan for bad
-- bytes and a split); the others by a scan and a split.
local bad = 'WRONGTYPE a field of the shares is not a node\'s record'
local names, recs, n, mi = {}, {}, 0, nil
for i = 1, #all, 2 do
  local v = all[i + 1]
  local t
  local a, b, c, d, e, f = string.match(v, '^(%-?%d+) (%d+) (%d+) (%d+) (%d+) (%d+)$')
  if a then
    t = { a + 0, b + 0, c + 0, d + 0, e + 0, f + 0 }
  else
    local g, h, x, y
    a, b, c, d, e, f, g, h, x, y = string.match(v, '^(%-?%d+) (%d+) (%d+) (%d+) (%d+) (%d+) (%d+) (%d+) (%d+) (%d+)$')
    if a then
      t = { a + 0, b + 0, c + 0, d + 0, e + 0, f + 0, g + 0, h + 0, x + 0, y + 0 }
    else
      if string.find(v, '[^%d %-]') then
        return redis.error_reply(bad)
      end
      t = {}
      local m = 0
      for tok in string.gmatch(v, '[^ ]+') do
        local z = tonumber(tok) -- digits and '-' only: an integer, or nil
        if not z then
          return redis.error_reply(bad)
        end
        m = m + 1
        t[m] = z
      end
    end
  end
  local m = #t
  local ok = m >= 2 and (m - 2) % 4 == 0 and t[1] >= -1 and t[1] <= 1073741824 and t[2] >= 0 and t[2] < 9007199254740992
  if ok then
    for j = 3, m, 4 do
      if t[j] < 0 or t[j + 1] < t[j] or t[j + 1] >= 9007199254740992 or t[j + 2] < 1 or t[j + 2] > P or t[j + 3] < 0 or t[j + 3] >= 9007199254740992 then
        ok = false
      end
      -- The allocator's time never goes back (see gcra.Share).
      if t[j] > now then
        now = t[j]
      end
    end
  end
  if not ok then
    return redis.error_reply(bad)
  end
  n = n + 1
  names[n], recs[n] = all[i], t
  if all[i] == node then
    mi = n
  end
end
if th > nh or (th == nh and tl > nl) then
  -- (the fence's copy is read only for a TAT ahead)
  local fence = redis.pcall('GET', KEYS[3])
  if type(fence) ~= 'string' or raw ~= fence then
    return redis.error_reply('SHAREMIXED funnel: the key holds a TAT after now: it is also decided plainly; nothing was granted')
  end
end

-- The time a bucket of c units takes to drain at k parts, in µs rounded up
-- (gcra.ShareDrain).
local function drain(c, k)
  if k <= 0 or c <= 0 then
    return 0
  end
  local a = c * interval
  local r = a % k
  local x = r * P + k - 1
  local ns = (a - r) / k * P + (x - x % k) / k + 999
  return (ns - ns % 1000) / 1000
end

if not mi then
  n = n + 1
  names[n], recs[n], mi = node, { dem, 0 }, n
end
local mine = recs[mi]
mine[1] = dem
-- The caller's older reservations are cut to the level it keeps them
-- within, and end Grace after now, plus that level's drain.
for j = 3, #mine, 4 do
  if mine[j + 3] > level then
    mine[j + 3] = level
  end
  local cut = now + grace + drain(mine[j + 3], mine[j + 2])
  if mine[j + 1] > cut then
    mine[j + 1] = cut
  end
end
mine[2] = now + life + (life - life % 4) / 4

-- Prune, and sum the others' holdings at now.
local usedK, usedC = 0, 0
local dems, nd = {}, 0
local kept, nk = {}, 0
local dels, sets = {}, {}
for i = 1, n do
  local t = recs[i]
  local m = #t
  local w = 3
  for j = 3, m, 4 do
    if t[j + 1] > now then
      if w ~= j then
        t[w], t[w + 1], t[w + 2], t[w + 3] = t[j], t[j + 1], t[j + 2], t[j + 3]
      end
      w = w + 4
    end
  end
  local pruned = w <= m
  for j = m, w, -1 do
    t[j] = nil
  end
  if i ~= mi and w == 3 and t[2] <= now then
    dels[#dels + 1] = names[i]
  else
    nk = nk + 1
    kept[nk] = t
    local d = t[1]
    if d < 0 then
      d = 2147483648
    end
    nd = nd + 1
    dems[nd] = d
    if i ~= mi then
      local km, cm = 0, 0
      for j = 3, w - 1, 4 do
        if t[j] <= now and now < t[j + 1] then
          if t[j + 2] > km then
            km = t[j + 2]
          end
          if t[j + 3] > cm then
            cm = t[j + 3]
          end
        end
      end
      usedK, usedC = usedK + km, usedC + cm
      if pruned then
        sets[#sets + 1] = names[i]
        sets[#sets + 1] = string.format('%d' .. string.rep(' %d', #t - 1), unpack(t))
      end
    end
  end
end

-- Targets: water-filling of the rate on the demands (gcra's shareTargets).
table.sort(dems)
local left, level = P, 2147483648
for i = 1, nd do
  local rest = nd - i + 1
  local q = (left - left % rest) / rest
  if dems[i] >= q then
    level, left = q, 0
    break
  end
  left = left - dems[i]
end
local extra = (left - left % nd) / nd
local sumW = 0
for i = 1, nd do
  local x = math.min(dems[i], level) + extra
  if x > 0 then
    sumW = sumW + math.floor(math.sqrt(math.min(x, 4503599627370496)))
  end
end
local unmeasured = dem < 0
local myd = dem
if unmeasured then
  myd = 2147483648
end
local tm = math.min(myd, level) + extra
local wm = 0
if tm > 0 then
  wm = math.floor(math.sqrt(math.min(tm, 4503599627370496)))
end

-- The grant.
local kT = math.min(tm, P)
local cT = 0
if sumW > 0 then
  local a = limit * wm
  cT = (a - a % sumW) / sumW
end
local span = math.max(tol, life * 1000)
if unmeasured then
  local f = P - usedK
  kT = math.min(kT, (f - f % 4) / 4)
  span = life * 1000
  span = (span - span % 4) / 4
end
local intervals = (span - span % interval) / interval
cT = math.max(cT, 1) -- within what k drains in the span: see c below
if unmeasured then
  local f = limit - usedC
  cT = math.min(cT, math.max((f - f % 4) / 4, 1))
end
local k = math.min(kT, P - usedK)
local a = k * intervals
local c = math.min(cT, limit - usedC, (a - a % P) / P)
local last = life
local kD = kT
if not unmeasured then
  kD = math.min(kT, dem)
end
if unmeasured or k * 10 < kD * 8 then
  last = (life - life % 4) / 4
end
if k <= 0 or c < 1 then
  k, c = 0, 0
end
local e = now + last
local hold = e
if k > 0 then
  hold = hold + drain(c, k)
  local m = #mine
  mine[m + 1], mine[m + 2], mine[m + 3], mine[m + 4] = now, hold, k, c
end

-- The last of the holds and of the seens.
local top, last = 0, 0
for i = 1, nk do
  local t = kept[i]
  if t[2] > top then
    top = t[2]
  end
  for j = 4, #t, 4 do
    if t[j] > last then
      last = t[j]
    end
  end
end
if last > top then
  top = last
end

-- The fence (gcra.ShareFence), while a reservation is live: the last hold
-- plus the tolerance, as a TAT in seconds and nanoseconds, written to the
-- funnel's key as gcra.lua writes a TAT (x, the fence less Redis's time,
-- is above 0: the allocator's time is never behind Redis's) and to the
-- fence's key, with the same expiry.
if last > now then
  local us = last % 1000000
  th = (last - us) / 1000000
  tl = us * 1000 + tol
  local carry = tl % 1000000000
  th, tl = th + (tl - carry) / 1000000000, carry
  local xh, xl = th - nh, tl - nl
  if xl < 0 then
    xh, xl = xh - 1, xl + 1000000000
  end
  local wh, wl, wv, wms, wpx
  --> store.lua
  redis.call('PSETEX', KEYS[3], wpx, wv)
end

-- Write back, and expire the hash with the last of its holds and seens.
sets[#sets + 1] = node
sets[#sets + 1] = string.format('%d' .. string.rep(' %d', #mine - 1), unpack(mine))
if #dels > 0 then
  redis.call('HDEL', sk, unpack(dels))
end
redis.call('HSET', sk, unpack(sets))
if slack > 0 then
  -- An injected clock: the expiry counts from it, lengthened by slack.
  local us = top - clock + 999
  redis.call('PEXPIRE', sk, string.format('%d', (us - us % 1000) / 1000 + slack))
else
  local ms = (top - top % 1000) / 1000
  if top % 1000 > 0 then
    ms = ms + 1
  end
  redis.call('PEXPIREAT', sk, string.format('%d', ms))
end
return { now, now, e, hold, k, c }
