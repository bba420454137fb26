-- A lease: gcra.Lease on a Redis key, reproduced bit for bit. It takes up to
-- a number of units of the key's funnel at once, as that many admissions at
-- now would, after giving back the unspent tail of the caller's previous
-- lease if the key's TAT is still that lease's end (compared as the decimal
-- string this package and redis-cell write). The key keeps redis-cell's
-- format, so that leasing stores, plain Redis stores and the redis-cell
-- module can share keys.
--
-- Times are on two limbs (seconds and nanoseconds), as in gcra.lua. The
-- size of a lease is a quotient, computed in doubles on the headroom
-- (tolerance - d), which is below 2^52 (gcra.MaxLeaseTolerance), so that
-- every number in it is exact. (With a horizon the headroom is the
-- tolerance plus the horizon, at most 2^52 too: gcra.Lease's arithmetic with
-- its tolerance extended, which this script needs not know.)
--
-- KEYS[1]  the key
-- ARGV[1]  "l"
-- ARGV[2]  "" to take the time from Redis's TIME; tests only: now's seconds,
-- ARGV[3]  and now's nanoseconds
-- ARGV[4]  milliseconds added to the expiry (0 except in tests)
-- ARGV[5]  the interval T in ns
-- ARGV[6]  the headroom in ns: the tolerance plus the horizon of
--          future-dated units (at most 2^52)
-- ARGV[7]  the most units to take, ARGV[8] the fewest worth taking
-- ARGV[9]  the previous lease's end TAT as a decimal string, or ""
-- ARGV[10] the time its unspent units are worth, units*T in ns (below 2^52)
-- KEYS[2]  optional: the sorted set of the key's leasing nodes, in its slot;
--          then ARGV[11] this node's name, ARGV[12] the window in ms within
--          which a node counts
--
-- Reply: { now's seconds, now's nanoseconds, units granted, the TAT after
-- as seconds and nanoseconds (0, 0 for an absent key), the nodes counted
-- (0 without KEYS[2]) }. A key that holds
-- anything but a decimal TAT within int64 is a WRONGTYPE error and is left
-- as it is.

local nh, nl
--> fns.lua
local ti = 2
--> now.lua
local key = KEYS[1]
local slack = ARGV[4] + 0
-- The last value and expiry written (see store.lua).
local wh, wl, wv, wms, wpx
local th, tl = 0, 0
--> get.lua
local interval, tol = ARGV[5] + 0, ARGV[6] + 0
local changed = false

-- The give-back, only onto the TAT this caller's lease left.
local back = ARGV[10] + 0
if raw and back > 0 and raw == ARGV[9] then
  local bl = back % 1000000000
  th, tl = th - (back - bl) / 1000000000, tl - bl
  if tl < 0 then
    th, tl = th - 1, tl + 1000000000
  end
  if th < nh or (th == nh and tl < nl) then
    th, tl = nh, nl
  end
  changed = true
end

local head, want, least = tol, ARGV[7] + 0, ARGV[8] + 0
--> fit.lua
if n > 0 then
  -- The new TAT is max(TAT, now) + n*T = now + d + n*T.
  local x = d + n * interval
  local xh, xl = (x - x % 1000000000) / 1000000000, x % 1000000000
  th, tl = nh + xh, nl + xl
  if tl >= 1000000000 then
    th, tl = th + 1, tl - 1000000000
  end
  --> store.lua
elseif changed then
  local xh, xl = dh, dl
  --> store.lua
end
if not raw and n == 0 then
  th, tl = 0, 0
end
local nowms = nh * 1000 + (nl - nl % 1000000) / 1000000
local node, win = ARGV[11], ARGV[12]
--> nodes.lua
return { nh, nl, n, th, tl, nodes }
