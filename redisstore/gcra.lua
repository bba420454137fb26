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
-- ARGV[4+i], for the i-th key of a throttle: "" when its cost and tolerance
--          are those of the key before, else the index j of the arguments
--          that hold them: ARGV[j .. j+3] are the cost's seconds and
--          nanoseconds, the tolerance's seconds and nanoseconds (they come
--          after the keys' arguments)
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
-- The script is on the hot path of every decision, and each call of a Redis
-- command from Lua costs Redis CPU (much more than the arithmetic): a batch
-- reads all its keys with one MGET, decides its requests in order on the
-- TATs kept in Lua tables, and writes each key it changed once, at the end,
-- with the expiry of its last TAT -- the state the requests one after the
-- other would have left. The common cases take few calls of C functions (one
-- pattern match per key, string-to-number coercion rather than tonumber, a
-- plain integer reply).

local nh, nl
if ARGV[2] == '' then
  local t = redis.call('TIME')
  nh, nl = t[1] + 0, t[2] * 1000
else
  nh, nl = ARGV[2] + 0, ARGV[3] + 0
end
local op = ARGV[1]
local nk = #KEYS

-- The state of each distinct key: its TAT's limbs, whether it exists, why it
-- cannot be read (false if it can; 1 not a decimal number, 2 beyond int64, 3
-- not a string), and whether a request changed it. order lists the keys in
-- order of first appearance.
local TH, TL, RAW, BAD, DIRTY = {}, {}, {}, {}, {}
local order, nd = {}, 0

-- parse returns the limbs of the TAT in raw, a string value, and false; or
-- 0, 0 and why it is not a TAT.
local function parse(raw)
  -- Every TAT from 2001 to 2286 has 19 digits: one match splits it.
  local h, l = string.match(raw, '^([1-9]%d%d%d%d%d%d%d%d%d)(%d%d%d%d%d%d%d%d%d)$')
  if h then
    h, l = h + 0, l + 0
    if h > 9223372036 or (h == 9223372036 and l > 854775807) then
      return 0, 0, 2
    end
    return h, l, false
  end
  -- Other lengths, a '+' or leading zeros (Rust's u64 parser, which
  -- redis-cell uses, takes both), or no number at all.
  local d = string.match(raw, '^%+?0*(%d*)$')
  if not d or not string.find(raw, '%d') then
    return 0, 0, 1
  end
  local n = #d
  if n > 19 then
    return 0, 0, 2
  elseif n > 9 then
    h, l = string.sub(d, 1, n - 9) + 0, string.sub(d, n - 8) + 0
    if h > 9223372036 or (h == 9223372036 and l > 854775807) then
      return 0, 0, 2
    end
    return h, l, false
  elseif n > 0 then
    return 0, d + 0, false
  end
  return 0, 0, false
end

local raws
if nk == 1 then
  local raw = redis.pcall('GET', KEYS[1])
  if raw and raw.err then
    -- a list, a hash...: GET's own WRONGTYPE error
    return redis.error_reply('WRONGTYPE the value is not a string')
  end
  raws = {raw}
else
  raws = redis.call('MGET', unpack(KEYS))
end
local absent, na = {}, 0
for i = 1, nk do
  local key = KEYS[i]
  if BAD[key] == nil then
    nd = nd + 1
    order[nd] = key
    local raw = raws[i]
    if raw then
      RAW[key] = true
      TH[key], TL[key], BAD[key] = parse(raw)
    else
      TH[key], TL[key], BAD[key] = 0, 0, false
      na = na + 1
      absent[na] = key
    end
  end
end
-- MGET answers nil for a key of another type too: if any of the keys it
-- found absent exists, find which.
if nk > 1 and na > 0 and redis.call('EXISTS', unpack(absent)) > 0 then
  for i = 1, na do
    if redis.call('EXISTS', absent[i]) == 1 then
      BAD[absent[i]] = 3
    end
  end
end

local out, no = {}, 0
local ch, cl, vh, vl

for i = 1, nk do
  local key = KEYS[i]
  if op == 't' then
    local a = ARGV[4 + i]
    if a ~= '' then
      a = a + 0
      ch, cl, vh, vl = ARGV[a] + 0, ARGV[a + 1] + 0, ARGV[a + 2] + 0, ARGV[a + 3] + 0
    end
  end
  local bad = BAD[key]
  if bad then
    if nk == 1 then
      if bad == 1 then
        return redis.error_reply('WRONGTYPE the value is not a decimal number')
      end
      return redis.error_reply('WRONGTYPE the value is beyond int64 nanoseconds')
    end
    no = no + 1
    out[no] = -9 - bad
  else
    -- d = max(TAT - now, 0)
    local th, tl = TH[key], TL[key]
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
          else
            status = 1
            TH[key], TL[key], DIRTY[key] = zh, zl, true
          end
        end
      end
    elseif op == 'd' and RAW[key] then
      redis.call('DEL', key)
    end

    if dh < 1125899 then
      if nk == 1 and status ~= 1 then
        return (dh * 1000000000 + dl) * 4 + status
      end
      no = no + 1
      out[no] = (dh * 1000000000 + dl) * 4 + status
    else
      out[no + 1], out[no + 2], out[no + 3] = -1 - status, dh, dl
      no = no + 3
    end
  end
end

-- Write each changed key once, with its last TAT.
local slack = ARGV[4] + 0
for i = 1, nd do
  local key = order[i]
  if DIRTY[key] then
    local zh, zl = TH[key], TL[key]
    -- x = TAT - now >= 0
    local xh, xl = zh - nh, zl - nl
    if xl < 0 then
      xh, xl = xh - 1, xl + 1000000000
    end
    if xh == 0 and xl == 0 then
      -- The TAT is now: the same state as an absent key.
      if RAW[key] then
        redis.call('DEL', key)
      end
    else
      -- Expire when the TAT is reached, in whole milliseconds rounded up,
      -- so that the key never vanishes while its TAT is ahead.
      local sub = xl % 1000000
      local ms = xh * 1000 + (xl - sub) / 1000000 + slack
      if sub > 0 then
        ms = ms + 1
      end
      local v
      if zh > 0 then
        v = string.format('%d%09d', zh, zl)
      else
        v = string.format('%d', zl)
      end
      -- (ms goes as a string: Redis would format a number with %.17g,
      -- which costs more than the integer format)
      redis.call('SET', key, v, 'PX', string.format('%d', ms))
    end
  end
end

if no == 1 then
  return out[1]
end
return out
