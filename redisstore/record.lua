-- A part of family.lua, written into it where a line says "--> record.lua"
-- (see include in scripts.go), once the ops are applied: a reserve whose
-- take was admitted records the reservation under KEYS[3] (see
-- settle.lua), from ARGV[a], its TTL in ms, and ARGV[a + 1], the record's
-- fields from the estimate on; its millisecond is the one a sliding log's
-- entries were recorded at, now's rounded down for the others; a funnel's
-- and a delaying bucket's record ends its line with the TAT the take left
-- (two limbs). It expires with its TTL. A settle that applied its op marks the record settled at
-- its actual units (written over the first fields, of a fixed width, so
-- that the record keeps its expiry), and adds to the reply whether the
-- reservation was settled before, the actual units (the first settle's
-- when it was), the estimate (both on two limbs) and the limit, a string
-- (which the client returns as its bytes).
if ARGV[5] == 'v' then
  if all then
    local ttl = ARGV[a] + 0
    local r = ttl % 1000
    local uh, ul = add(nh, nl, (ttl - r) / 1000, r * 1000000)
    local at, rec = nowms, ARGV[a + 1]
    local op = ops[1]
    if op.alg == 'o' and op.packed then
      -- the newest entry of the packed log
      at = -1
      local raw = redis.call('GET', op.key)
      if raw then
        local off = string.match(raw, '^L%d+:()')
        local total = (#raw - off + 1) / 6
        if total > 0 then
          at = LOG.pent(raw, off, total)
        end
      end
    elseif op.alg == 'o' then
      at = zlast(op.key)
    elseif op.alg == 'g' or op.alg == 'l' then
      -- the TAT the take left, after the parameters
      local i = string.find(rec, '\n', 1, true)
      rec = string.sub(rec, 1, i - 1) .. string.format(' %d %d', op.nh, op.nl) .. string.sub(rec, i)
    end
    redis.call('SET', KEYS[3], string.format('0 0000000000 000000000 %d %d %d ', uh, ul, at) .. rec, 'PX',
      ms(ttl + slack))
  end
elseif settle then
  if not again and ops[1].status ~= 2 then
    -- in place: the record's expiry stays
    redis.call('SETRANGE', KEYS[3], 0, string.format('1 %010d %09d', ah, al))
  end
  local again1 = 0
  if again then
    again1 = 1
  end
  out[#out + 1] = again1
  out[#out + 1] = ah
  out[#out + 1] = al
  out[#out + 1] = eh
  out[#out + 1] = el
  out[#out + 1] = limit
end
