-- One acquire or release of a concurrency limit (see family.lua) whose key
-- is absent or holds live leases, as a script of its own, whose arguments
-- and reply are short (see window.lua for why that counts). A key of up to
-- CONCREAD leases is read whole, with one ZRANGE, and decided from what it
-- answered: an acquire of a fresh lease is then a read and two writes
-- (ZADD, PEXPIRE), and a release of the last lease a read and a DEL. A
-- larger key is read a command per number it needs (the latest expiry
-- once, known after a write without reading it again). Any other key (of
-- another kind, or whose leases have all expired) answers -1 and is left
-- as it is: family.lua decides it, by the same rules.
--
-- KEYS[1]  the key
-- ARGV     now's seconds and nanoseconds ('', or '-' or '~' and a guard,
--          and a deadline: see now.lua); the slack plus LOGPACK times 10^7
--          plus CONCREAD times 10^10 (as family.lua's ARGV[3]); the
--          quantity of an acquire, or 'r' for a release; the count (with
--          the burst), the period in ms, the lease id; then, only when the
--          latency is not -1 (-1: the key's unit delay is not needed, and
--          is not read; an acquire's is otherwise 0), for an acquire the
--          score of the marker of a key given the default unit delay u in
--          ns, -1-u ('' when u is 0), and for a release its latency in ns
--
-- Reply: now in microseconds (exact until 2255: Go takes an injected
-- clock's now from its own arguments), then what family.lua answers for
-- the op in fewer numbers: n*4 + status + 2*held (the leases held,
-- whether admitted, for a release whether it held its lease, and whether
-- it did for an acquire), the latest expiry of the leases held, the same
-- but this one's, and, for an acquire only and only when not 0 and -1,
-- the key's unit delay and the expiry to wait for; or now and -1.

local nh, nl
local ti = 1
--> now.lua
local nowms = nh * 1000 + (nl - nl % 1000000) / 1000000
-- now in microseconds, which the reply gives as one number (TIME's
-- precision; Go knows an injected clock's nanoseconds)
local us = nh * 1000000 + (nl - nl % 1000) / 1000
local slack0 = ARGV[3] + 0
local slack = slack0 % 10000000
local key = KEYS[1]
local CONCREAD = (slack0 - slack0 % 10000000000) / 10000000000
-- the marker and up to CONCREAD leases, and one more to tell whether
-- there are more (CONCREAD is 16 but in tests: its stop is then not
-- formatted)
local stop = '17'
if CONCREAD ~= 16 then
  stop = string.format('%d', CONCREAD + 1)
end
local m = redis.pcall('ZRANGE', key, '0', stop, 'WITHSCORES')
if not m.err and (not m[1] or m[1] == '\0conc') then
  local take, id = ARGV[4] ~= 'r', ARGV[7]
  -- def: the default unit delay's marker ('' for none), as Go wrote it
  local def, lat = '', -1
  local x = ARGV[8]
  if x then
    if take then
      def, lat = x, 0
    else
      lat = x + 0
    end
  end
  -- the entries read (the marker first), and whether they are all
  local nm = #m / 2
  local whole = nm <= CONCREAD + 1
  local exists, last = m[1] ~= nil, -1
  -- read whole: the expiry before the last (-1 when there is no other
  -- lease), this lease's, and the number of those at or before now (old
  -- of them), each score read once
  local prev, own, old = -1, nil, 0
  if whole then
    for i = 2, nm do
      local s = m[2 * i] + 0
      if s <= nowms then
        old = old + 1
      end
      if m[2 * i - 1] == id then
        own = s
      end
      prev, last = last, s
    end
  elseif exists then
    local r = redis.call('ZRANGE', key, '-1', '-1', 'WITHSCORES')
    if r[2] + 0 >= 0 then
      last = r[2] + 0
    end
  end
  -- leases that have all expired go to family.lua
  if not exists or last > nowms then
    -- last stays the latest expiry: it is after now, and only expiries
    -- at or before now are dropped. The expired leases (old of them)
    -- are dropped only by a write: a peek or a refusal leaves them, as
    -- memstore does, so that they count again after a clock stepped
    -- back. others is the latest expiry of the live leases but this
    -- one (-1: none).
    local n, held, wait, others, unit = 0, 0, -1, -1, 0
    if exists and whole then
      n = nm - 1 - old
      if take and lat >= 0 then
        unit = -1 - m[2]
      end
      others = last
      if own and own == last then
        -- the one before it
        others = -1
        if prev > nowms then
          others = prev
        end
      end
    elseif exists then
      old = redis.call('ZCOUNT', key, '0', string.format('%d', nowms))
      n = redis.call('ZCARD', key) - 1 - old
      if take and lat >= 0 then
        unit = -1 - redis.call('ZSCORE', key, '\0conc')
      end
      own = redis.call('ZSCORE', key, id)
      if own then
        own = own + 0
      end
      others = last
      if own and own == last then
        others = -1
        local r = redis.call('ZRANGE', key, '-2', '-2', 'WITHSCORES')
        if r[2] + 0 > nowms then
          others = r[2] + 0
        end
      end
    end
    if own and own > nowms then
      held = 1
    end
    local status = 1
    if take then
      local q, count, period = ARGV[4] + 0, ARGV[5] + 0, ARGV[6] + 0
      if q > 1 then
        status = 0
      elseif q == 1 and held == 0 and n >= count then
        status = 0
        -- the expiry that leaves room for one: the (n-count+1)-th live
        -- lease's, at index old+n-count+1 after the marker
        local at = old + n - count + 1
        if whole then
          wait = m[2 * at + 2] + 0
        else
          local i = string.format('%d', at)
          wait = redis.call('ZRANGE', key, i, i, 'WITHSCORES')[2] + 0
        end
      elseif q == 1 then
        if old > 0 then
          redis.call('ZREMRANGEBYSCORE', key, '0', string.format('%d', nowms))
        end
        local at = nowms + period
        local ats = string.format('%d', at)
        -- a key takes the default unit delay when it has none
        if unit == 0 and (def ~= '' or not exists) then
          local mark = '-1'
          if def ~= '' then
            mark = def
          end
          redis.call('ZADD', key, mark, '\0conc', ats, id)
        else
          redis.call('ZADD', key, ats, id)
        end
        -- the key lasts as long as its latest lease: this one, for its
        -- period (ARGV[6], as Go wrote it), or another
        if others > at then
          redis.call('PEXPIRE', key, string.format('%d', others - nowms + slack))
        elseif slack == 0 then
          redis.call('PEXPIRE', key, ARGV[6])
        else
          redis.call('PEXPIRE', key, string.format('%d', period + slack))
        end
      end
    else
      status = held
      if held == 1 then
        n = n - 1
      end
      if held == 1 and n <= 0 then
        redis.call('DEL', key)
        last = -1
      else
        if old > 0 and (held == 1 or lat <= 0) then
          -- (a latency reported for a lease not held is an error, which
          -- changes nothing)
          redis.call('ZREMRANGEBYSCORE', key, '0', string.format('%d', nowms))
        end
        if held == 1 then
          redis.call('ZREM', key, id)
          if lat > 0 then
            -- a release reads the key's unit delay only here
            if whole then
              unit = -1 - m[2]
            else
              unit = -1 - redis.call('ZSCORE', key, '\0conc')
            end
            local sum = unit + lat
            unit = (sum - sum % 2) / 2
            if unit < 1 then
              unit = 1
            end
            redis.call('ZADD', key, string.format('%d', -1 - unit), '\0conc')
          end
          last = others
          redis.call('PEXPIRE', key, string.format('%d', last - nowms + slack))
        end
      end
    end
    -- the key's unit delay and the expiry to wait for only when not 0
    -- and -1, and only for an acquire (a release's result does not
    -- depend on them)
    local r = { us, n * 4 + status + 2 * held, last, others }
    if take and (unit ~= 0 or wait ~= -1) then
      r[5] = unit
      if wait ~= -1 then
        r[6] = wait
      end
    end
    return r
  end
end
return { us, -1 }
