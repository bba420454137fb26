-- A part of family.lua and log.lua, written into them where a line says
-- "--> logtake.lua" (see include in scripts.go): one take of q units on
-- the sliding log key (count units per period ms; pstr, the period as
-- its decimal string), whose value raw (GET's answer: false when absent,
-- a table for an error, as a sorted set's) is absent or a packed log (see
-- family.lua): a packed log that is empty reads as absent. It sets ok
-- (declared false) when it decided, and then status (1 admitted and
-- written, 0 refused), n (the units the log counts before the take), wait
-- (the millisecond of the entry to wait for, or -1) and newest (the newest
-- entry's, or -1), as family.lua answers for a log; any other value is
-- left as it is, for family.lua's general path.
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
