-- A part of gcra.lua, written into it where a line says "--> decide.lua"
-- (see include in scripts.go): the decision of gcra.Decide on two limbs.
-- From now nh, nl, the TAT th, tl (0, 0 for an absent key), the cost ch, cl
-- (negative for a refund) and the tolerance vh, vl, it declares and sets
-- status: 1 allowed, 0 refused, 2 allowed but the new TAT would pass
--   2^63-1 (nothing is to be written);
-- dh, dl: d = max(TAT - now, 0);
-- xh, xl: x = new TAT - now (>= 0), when allowed;
-- and when allowed it sets th, tl to the new TAT.
local status, dh, dl, xh, xl = 0, 0, 0
if th > nh or (th == nh and tl > nl) then
  dh, dl = th - nh, tl - nl
  if dl < 0 then
    dh, dl = dh - 1, dl + 1000000000
  end
end
-- Allowed iff cost <= tolerance and x = d + cost <= tolerance.
if ch < vh or (ch == vh and cl <= vl) then
  xh, xl = dh + ch, dl + cl
  if xl >= 1000000000 then
    xh, xl = xh + 1, xl - 1000000000
  end
  if xh < vh or (xh == vh and xl <= vl) then
    if xh < 0 then
      -- A refund past an empty bucket leaves a full one.
      xh, xl = 0, 0
    end
    -- The new TAT is max(now, TAT) + cost = now + x; it must fit in an
    -- int64 (2^63-1 = 9223372036*1e9 + 854775807).
    local zh, zl = nh + xh, nl + xl
    if zl >= 1000000000 then
      zh, zl = zh + 1, zl - 1000000000
    end
    if zh > 9223372036 or (zh == 9223372036 and zl > 854775807) then
      status = 2
    else
      status, th, tl = 1, zh, zl
    end
  end
end
