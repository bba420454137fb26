-- A lease on the key of Redis's GCRA command: gcra.LeaseCommand, bit for
-- bit. It reads the key as gcracmd.lua does (the same errors, the same
-- absent keys), gives back the unspent tail of the caller's previous lease
-- if the key still holds that lease's end (compared as the decimal string),
-- takes up to a number of tokens that fit at once (or up to a horizon
-- ahead), and writes the new TAT as the command writes it: the µs in
-- decimal, expiring at the TAT's millisecond (PXAT). Now is Redis's time in
-- whole milliseconds, as the command's.
--
-- Times are µs on two limbs, h*1e9 + l with 0 <= l < 1e9 (see gcracmd.lua).
-- The size of a lease is a quotient computed in doubles on the headroom,
-- which is below 2^52 (gcra.MaxLeaseTolerance), so that every number in it
-- is exact.
--
-- KEYS[1]  the key
-- ARGV[1]  '' to take now from Redis's TIME; tests only: now in ms
-- ARGV[2]  '' to expire the key at the TAT's millisecond (PXAT); tests
--          only: milliseconds added to the expiry, set from the injected now
-- ARGV[3]  the interval in µs
-- ARGV[4]  the headroom in µs: the variance plus the horizon (at most 2^52)
-- ARGV[5]  the most tokens to take, ARGV[6] the fewest worth taking
-- ARGV[7]  the previous lease's end TAT as a decimal string, or ''
-- ARGV[8]  the time its unspent tokens are worth, tokens*interval in µs
-- KEYS[2]  optional: the sorted set of the key's leasing nodes, in its slot;
--          then ARGV[9] this node's name, ARGV[10] the window in ms within
--          which a node counts
--
-- Reply: {status, now_ms, tokens granted, th, tl, nodes}: th, tl the key's
-- TAT after the call (0, 0 for an absent key left absent), nodes the nodes
-- counted (0 without KEYS[2]), and status
--   1  done
--   3  the new TAT would pass 2^63-1 µs, nothing written
--  -1  the key holds a string that is not an integer (Redis's string2ll)
--  -2  the key holds an integer that is not positive
-- and a key of another type is Redis's WRONGTYPE error.
local slack = ARGV[2]
--> cmdkey.lua
if bad then
  return { bad, nowms, 0, 0, 0, 0 }
end

local interval, head = ARGV[3] + 0, ARGV[4] + 0
local changed = false

-- The give-back, only onto the TAT this caller's lease left.
local back = ARGV[8] + 0
if exists == 1 and back > 0 and raw == ARGV[7] then
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

-- d = max(TAT - now, 0) (an absent key is at now), and the tokens that fit
-- in head - d.
local want, least = ARGV[5] + 0, ARGV[6] + 0
--> fit.lua
local sh, sl = th, tl
if n > 0 then
  -- new = max(TAT, now) + n*interval = now + d + n*interval, within int64
  local x = d + n * interval
  local xl = x % 1000000000
  sh, sl = nh + (x - xl) / 1000000000, nl + xl
  if sl >= 1000000000 then
    sh, sl = sh + 1, sl - 1000000000
  end
  if sh > 9223372036 or (sh == 9223372036 and sl > 854775807) then
    return { 3, nowms, 0, 0, 0, 0 }
  end
  changed = true
end

if changed then
  --> cmdwrite.lua
end

local node, win = ARGV[9], ARGV[10]
--> nodes.lua
return { 1, nowms, n, sh, sl, nodes }
