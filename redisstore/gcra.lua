-- Funnel's GCRA on Redis keys: the decision of package gcra (Decide),
-- reproduced bit for bit, for one key or a batch of them. Each key holds
-- redis-cell's format: the theoretical arrival time (TAT) as a decimal count
-- of nanoseconds since the Unix epoch, expiring when the TAT is reached.
--
-- A negative cost is a refund: the TAT moves back by it, never to before
-- now (a refund past an empty bucket leaves a full bucket, an absent key).
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
-- ARGV[1]  "t" (throttle: this script only decides; keyops.lua reads and
--          deletes keys for TTL and Reset), or "u", a throttle of a batch
--          whose requests share one cost and tolerance, each on a key of
--          its own: it has no ARGV[4+i], and its cost's and tolerance's
--          limbs are ARGV[5] to ARGV[8]
-- ARGV[2]  "" to take the time from Redis's TIME, "-" to take it with a
-- ARGV[3]  deadline in ARGV[3] (see now.lua); tests only: now's seconds and
--          nanoseconds
-- ARGV[4]  milliseconds added to every expiry (0 except in tests)
-- ARGV[4+i], for the i-th request: "" if its cost and
--          tolerance are those of the request before and its key comes once,
--          else the number a*256 + l*128 + f, where
--            a is the index of the four arguments that hold its cost's
--              seconds (rounded down: negative for a refund) and
--              nanoseconds (0 to 1e9-1) and its tolerance's seconds and
--              nanoseconds (they come after the requests' arguments), or 0
--              if they are those of the request before;
--            f is 0 if its key comes once, else the index of the first
--              request on its key;
--            l is 1 on the last request on a key that comes more than once.
--
-- For each key, the answer is its status and d = max(TAT - now, 0), the time
-- to a full bucket before the request, in ns. The status is 1 if allowed
-- (and written), 0 if refused, 2 if allowed but the new TAT would pass
-- 2^63-1 (nothing written). The answer is
-- the integer d*4 + status when d < 2^50, else the pair -1-status, then d's
-- seconds and nanoseconds. A key that holds anything but a decimal TAT within
-- int64 is left as it is and answers -10 (not a decimal number), -11 (beyond
-- int64) or -12 (not a string).
--
-- With one key the reply is that key's answer, and a WRONGTYPE error for a key
-- that holds anything else; with several keys it is the array of their
-- answers, in order.
--
-- The script is on the hot path of every decision, and what it costs Redis
-- is the calls of C functions (a Redis command, string.format, a pattern
-- match), the tables and closures it makes and the Lua functions it calls,
-- far more than its arithmetic. So one key takes a path of its own, inline;
-- a batch reads all its keys with one MGET, writes a key that comes once
-- right after its request, keeps the TAT of a key that comes more than once
-- in a table (at the index of its first request) and writes it once, after
-- its last request: the state the requests one after the other would have
-- left. A "u" batch, each key once, takes a loop of its own without that
-- bookkeeping (34,100 Redis instructions a decision against 35,600, in
-- batches of 16 out of 10,000 keys that hold TATs). Keys decided alike
-- (fresh keys under one limit) get the same value and expiry, formatted
-- once.
--
-- The paths read a TAT, decide, answer and write the same way, and that
-- text is written once, in tat.lua, decide.lua, answer.lua (the batches')
-- and store.lua: Go writes each in at the lines "--> name.lua" when the
-- package starts (include, in scripts.go), so that Redis runs them
-- inline. Local functions that the paths call would cost Redis more per
-- decision. Instructions that
-- redis-server 7.0 runs in EVALSHA per decision (callgrind; 10,000 calls
-- on one key each, or 200 batches of 64; every request allowed and written):
--
--                          two copies   decide() a    parts written in
--                          by hand      function      (this script)
--   one key, fresh            50,150    51,751 +3.2%     50,458 +0.6%
--   one key, hot              56,422    57,871 +2.6%     56,880 +0.8%
--   batches, fresh keys       20,257    21,063 +4.0%     20,383 +0.6%
--   batches, one hot key       9,004     9,912 +10%       9,176 +1.9%
--
-- With the reading and the writing in functions too, a decision costs 8% to
-- 15% more: each local function is a closure made at every call.

local nh, nl
--> fns.lua
local ti = 2
--> now.lua
local nk = #KEYS
local slack = ARGV[4] + 0
-- The last value and expiry written, as strings (see store.lua).
local wh, wl, wv, wms, wpx

if nk == 1 then
  local key = KEYS[1]
  local th, tl = 0, 0
  --> get.lua
  local a = ARGV[5] / 256
  local ch, cl, vh, vl = ARGV[a] + 0, ARGV[a + 1] + 0, ARGV[a + 2] + 0, ARGV[a + 3] + 0
  --> decide.lua
  if status == 1 then
    --> store.lua
  end
  if dh < 1125899 then
    return (dh * 1000000000 + dl) * 4 + status
  end
  return { -1 - status, dh, dl }
end

-- A batch: the same steps, for each request in turn.
local keys, argv = KEYS, ARGV

local raws = redis.call('MGET', unpack(keys))
-- MGET answers nil for a key of another type too: if any of the keys it
-- found absent exists, find which.
local absent, na = {}, 0
for i = 1, nk do
  if not raws[i] then
    na = na + 1
    absent[na] = keys[i]
  end
end
local wrong
if na > 0 and redis.call('EXISTS', unpack(absent)) > 0 then
  wrong = {}
  for i = 1, nk do
    if not raws[i] and redis.call('EXISTS', keys[i]) == 1 then
      wrong[i] = true
    end
  end
end

local out, no = {}, 0
local ch, cl, vh, vl

-- A batch whose requests share one limit and quantity, each on a key of
-- its own (ARGV[1] is "u"), has no argument per request, and its limbs
-- are ARGV[5] to ARGV[8]. Each key is read, decided and written once: the
-- loop below without its bookkeeping of keys that come more than once.
if argv[1] == 'u' then
  ch, cl, vh, vl = argv[5] + 0, argv[6] + 0, argv[7] + 0, argv[8] + 0
  for i = 1, nk do
    local th, tl, bad = 0, 0, false
    local raw = raws[i]
    if raw then
      --> tat.lua
    elseif wrong and wrong[i] then
      bad = 3
    end
    if bad then
      no = no + 1
      out[no] = -9 - bad
    else
      --> decide.lua
      --> answer.lua
      if status == 1 then
        -- decide.lua left x = new TAT - now in xh, xl.
        local key = keys[i]
        --> store.lua
      end
    end
  end
  return out
end

-- The state of a key that comes more than once, at the index f of its first
-- request: its TAT TH[f], TL[f], why it cannot be read B[f] (false if it
-- can), and C[f] true once a request changed it.
local TH, TL, B, C
-- The last argument decoded, not "" (the middle requests on a key that
-- comes more than once have the same).
local pm, pf, plast = '', 0, false
for i = 1, nk do
  local f, last = 0, false
  local m = argv[4 + i]
  if m == pm then
    f, last = pf, plast
  elseif m ~= '' then
    pm = m
    m = m + 0
    f = m % 128
    m = (m - f) / 128
    if m % 2 == 1 then
      last, m = true, m - 1
    end
    if m > 0 then
      local a = m / 2
      ch, cl, vh, vl = argv[a] + 0, argv[a + 1] + 0, argv[a + 2] + 0, argv[a + 3] + 0
    end
    pf, plast = f, last
  end
  local th, tl, bad = 0, 0, false
  if f == 0 or f == i then
    local raw = raws[i]
    if raw then
      --> tat.lua
    elseif wrong and wrong[i] then
      bad = 3
    end
    if f == i then
      if not TH then
        TH, TL, B, C = {}, {}, {}, {}
      end
      TH[f], TL[f], B[f], C[f] = th, tl, bad, false
    end
  else
    th, tl, bad = TH[f], TL[f], B[f]
  end
  if bad then
    no = no + 1
    out[no] = -9 - bad
  else
    --> decide.lua
    if f > 0 and status == 1 then
      TH[f], TL[f], C[f] = th, tl, true
    end
    --> answer.lua

    -- A key is written once, after its last request, if one changed it.
    if (f == 0 and status == 1) or (last and C[f]) then
      local key, raw = keys[i], raws[i]
      -- x = TAT - now >= 0
      local xh, xl = th - nh, tl - nl
      if xl < 0 then
        xh, xl = xh - 1, xl + 1000000000
      end
      --> store.lua
    end
  end
end
return out
