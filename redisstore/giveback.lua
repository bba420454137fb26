-- A part of family.lua, written into it where a line says "--> giveback.lua"
-- (see include in scripts.go), once the ops are parsed and before the keys
-- are read: a reserve is a take from here on, and a settle below the
-- estimate gives back g = gh, gl units of what the key still counts of the
-- estimate (see funnel.ReserveStore): a funnel's and a delaying bucket's
-- TAT moves back g intervals, but never by more than the TAT the take
-- left (rth, rtl) less now, nor before now; a fixed window's count
-- goes down by g (never below zero) when now is in the window that holds
-- the reservation's millisecond sm; a sliding window counter's current
-- count when sm is in the current window, its previous count when sm is in
-- the previous one (neither from the state of a later window, after the
-- clock was stepped back); a sliding log drops up to g of its entries at sm (in
-- a sorted set the highest numbered, so that the ones left are numbered 1..k), unless it is
-- over its count (see algo.LogGiveBack). A key that
-- holds another algorithm's state is refused before anything is written.
-- The op is then a charge of 0, which answers the state left.
if ARGV[5] == 'v' then
  ops[1].kind = 't'
end
if gh then
  local op = ops[1]
  local alg, key = op.alg, op.key
  local want = alg
  if want == 'g' or want == 'l' then
    want = 't'
  end
  local kind, empty, a1, a2, a3 = inspect(key)
  if kind == false or (kind and kind ~= want and not empty) then
    return wrongtype(1)
  end
  if kind and not empty then
    local g = gh * E9 + gl
    if alg == 'g' or alg == 'l' then
      local dh, dl = sub(a1, a2, nh, nl)
      local ch, cl = mul(ih, il, gh, gl)
      if rth then
        -- never more than the part of the estimate that has not drained:
        -- the TAT the take left, less now
        if less(nh, nl, rth, rtl) then
          local bh, bl = sub(rth, rtl, nh, nl)
          if not ch or less(bh, bl, ch, cl) then
            ch, cl = bh, bl
          end
        else
          ch, cl = 0, 0
        end
      end
      if ch == 0 and cl == 0 then
        -- nothing to give back
      elseif ch and less(ch, cl, dh, dl) then
        local xh, xl = sub(dh, dl, ch, cl)
        local th, tl = add(nh, nl, xh, xl)
        redis.call('SET', key, fmt(th, tl), 'PX', ms(pxOf(xh, xl) + slack))
      else
        redis.call('DEL', key)
      end
    elseif alg == 'f' then
      local s, e = op.ws, op.we
      if not s then
        return redis.error_reply('ERR funnel: the calendar window of key 1 is not near Redis time; are the clocks apart?')
      end
      -- (a state of a later window, the clock stepped back, is counted
      -- now, but holds none of the reservation's units: nothing is given
      -- back from it)
      if s <= sm and sm < e and a1 == s then
        if a2 > g then
          redis.call('SET', key, string.format('F%d:%d:%d', a1, a3, a2 - g), 'PX', ms(a3 - nowms + slack))
        else
          redis.call('DEL', key)
        end
      end
    elseif alg == 's' then
      local p = op.period
      local s = nowms - nowms % p
      local prev, cur = 0, 0
      -- (nor from a later window's state)
      if a1 == s then
        prev, cur = a2, a3
      elseif a1 == s - p then
        prev = a3
      end
      local changed = false
      if s <= sm and sm < s + p and cur > 0 then
        cur, changed = math.max(cur - g, 0), true
      elseif s - p <= sm and sm < s and prev > 0 then
        prev, changed = math.max(prev - g, 0), true
      end
      if changed then
        if cur > 0 then
          redis.call('SET', key, string.format('S%d:%d:%d:%d', s, p, prev, cur), 'PX', ms(s + 2 * p - nowms + slack))
        elseif prev > 0 then
          redis.call('SET', key, string.format('S%d:%d:%d:%d', s, p, prev, 0), 'PX', ms(s + p - nowms + slack))
        else
          redis.call('DEL', key)
        end
      end
    elseif a1 then -- 'o', a packed log (a1 the log, a2 where its entries start, a3 its period)
      -- the same as for a sorted set, below; the entries at sm are alike
      local raw, off, total = a1, a2, (#a1 - a2 + 1) / 6
      local k, old, first = 0, 0, 0
      for i = 1, total do
        local v = LOG.pent(raw, off, i)
        if v <= nowms - op.period then
          old = old + 1
        end
        if v == sm then
          if k == 0 then
            first = i
          end
          k = k + 1
        end
      end
      if k > 0 and total - old > op.count then
        k = 0
      end
      if k > 0 then
        local j = math.min(g, k)
        if total <= j then
          redis.call('DEL', key)
        else
          raw = LOG.plog(a3, string.sub(raw, off, off + 6 * (first - 1) - 1) .. string.sub(raw, off + 6 * (first - 1 + j)), 0, 0)
          off = #raw - 6 * (total - j) + 1
          -- (the entries left may all be a period old: the state is empty)
          local left = LOG.pent(raw, off, total - j) + a3 - nowms
          if left <= 0 then
            redis.call('DEL', key)
          else
            redis.call('PSETEX', key, ms(left + slack), raw)
          end
        end
      end
    else -- 'o'
      -- (a log over its count gives nothing back: a charge may have cut
      -- its oldest entries, see algo.LogGiveBack)
      local k = redis.call('ZCOUNT', key, sm, sm)
      if k > 0 and redis.call('ZCARD', key) - 1 - redis.call('ZCOUNT', key, 0, nowms - op.period) > op.count then
        k = 0
      end
      if k > 0 then
        local top = redis.call('ZCOUNT', key, '-inf', sm) - 1
        local j = math.min(g, k)
        redis.call('ZREMRANGEBYRANK', key, top - j + 1, top)
        if redis.call('ZCARD', key) <= 1 then
          redis.call('DEL', key)
        else
          -- the period of the limit that wrote the log last, its marker's
          -- (which the log keeps: it counts until its newest entry plus
          -- that period)
          local mk = redis.call('ZSCORE', key, MARK.o)
          redis.call('PEXPIRE', key, ms(zlast(key) - mk - nowms + slack))
        end
      end
    end
  end
end
