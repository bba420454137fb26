-- One take on a sliding log of a count up to family.lua's LOGPACK, without
-- a ban, whose key is absent or holds a packed log (see family.lua; a
-- packed log that is empty reads as absent), as a script of its own, whose
-- arguments and reply are short (see window.lua for why that counts): one
-- GET, the entries read from the string where they are, and one write for
-- an admission (the old entries dropped, the new ones at the millisecond
-- at or after now, never below the newest). Any other key answers -1 and
-- is left as it is: family.lua decides it (and packs a sorted-set log).
--
-- KEYS[1]  the key
-- ARGV     now's seconds and nanoseconds ('' or '-' and a deadline, see
--          now.lua), milliseconds added to every expiry (tests only), the
--          quantity, the count, the period in ms
--
-- Reply: now's seconds and nanoseconds, then n*4 + status (n the units the
-- log counted before the take; status 1 admitted and written, 0 refused),
-- the millisecond of the entry to wait for (-1: none) and the newest
-- entry's (-1: none), as family.lua answers for a log; or -1.

local nh, nl
local ti = 1
--> now.lua
local slack = ARGV[3] + 0
local key = KEYS[1]
local raw = redis.pcall('GET', key)
local q, count, period, pstr = ARGV[4] + 0, ARGV[5] + 0, ARGV[6] + 0, ARGV[6]
local ok, status, n, wait, newest = false, 1, 0, -1, -1
local per, off
if raw and type(raw) == 'string' then
  per, off = string.match(raw, '^L(%d+):()')
  if per and (#raw - off + 1) % 6 ~= 0 then
    per = nil
  end
end
if not raw or per then
  ok = true
  local nowms = nh * 1000 + (nl - nl % 1000000) / 1000000
  local total, last = 0, -1
  if per then
    total = (#raw - off + 1) / 6
    if total > 0 then
      last = struct.unpack('>I6', raw, off + 6 * (total - 1))
    end
    if last + per <= nowms then
      total, last = 0, -1 -- an empty log: as absent
    end
  end
  -- the entries at or before nowms - period (old of them) no longer count
  local old, cut = 0, nowms - period
  while old < total and struct.unpack('>I6', raw, off + 6 * old) <= cut do
    old = old + 1
  end
  n = total - old
  if n > 0 then
    newest = last
  end
  if n + q > count then
    status = 0
    if q <= count then
      wait = struct.unpack('>I6', raw, off + 6 * (old + n + q - count - 1))
    end
  elseif q > 0 then
    -- recorded at the millisecond at or after now, never below the
    -- newest entry (a clock that went back); the old entries dropped
    local at = nowms
    if nl % 1000000 > 0 then
      at = nowms + 1
    end
    if last > at then
      at = last
    end
    local body = ''
    if n > 0 then
      body = string.sub(raw, off + 6 * old)
    end
    local e = struct.pack('>I6', at)
    if q > 1 then
      e = string.rep(e, q)
    end
    redis.call('PSETEX', key, string.format('%d', at + period - nowms + slack), 'L' .. pstr .. ':' .. body .. e)
  end
end
if not ok then
  return { nh, nl, -1 }
end
return { nh, nl, n * 4 + status, wait, newest }
