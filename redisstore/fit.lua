-- A part of lease.lua and gcralease.lua, written into them where a line
-- says "--> fit.lua" (see include in scripts.go): the units of a lease. From
-- now nh, nl and the TAT th, tl (two limbs each; an absent key at 0, 0), the
-- headroom head and the interval (one unit of time each, below 2^52), and
-- the most and the fewest units to take (want, least), it sets dh, dl and
-- d, max(TAT - now, 0) on two limbs and whole, and n, the units that fit
-- in head - d, at most want, or 0 when fewer than least fit.
local dh, dl = 0, 0
if th > nh or (th == nh and tl > nl) then
  dh, dl = th - nh, tl - nl
  if dl < 0 then
    dh, dl = dh - 1, dl + 1000000000
  end
end
local n = 0
local d = dh * 1000000000 + dl
if dh < 4503600 and d <= head then
  -- Below 2^52: d, head - d and the products below are exact.
  local room = head - d
  n = math.floor(room / interval)
  if n * interval > room then
    n = n - 1
  elseif (n + 1) * interval <= room then
    n = n + 1
  end
  n = math.min(n, want)
  if n < least then
    n = 0
  end
end
