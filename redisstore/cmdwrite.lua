-- A part of gcracmd.lua and gcralease.lua, written into them where a line
-- says "--> cmdwrite.lua" (see include in scripts.go): it writes the TAT
-- sh, sl (µs on two limbs) to key as the command does, the µs in decimal
-- expiring at the TAT's millisecond (PXAT), or a millisecond later when
-- that is now's (see cmdkey.lua); in tests (slack not ''), relative to
-- the injected now, plus slack milliseconds.
local value
if sh > 0 then
  value = string.format('%d%09d', sh, sl)
else
  value = string.format('%d', sl)
end
-- the expiry, new / 1000 in ms, on limbs: sh * 1e6 + wl
local wl = (sl - sl % 1000) / 1000
if slack ~= '' then
  local px = (sh - nh) * 1000000 + wl - nsub + slack
  if sh == nh and wl == nsub then
    px = px + 1
  end
  redis.call('SET', key, value, 'PX', string.format('%d', px))
elseif sh == nh and wl == nsub then
  redis.call('SET', key, value, 'PXAT', string.format('%d', nowms + 1))
elseif sh > 0 then
  redis.call('SET', key, value, 'PXAT', string.format('%d%06d', sh, wl))
else
  redis.call('SET', key, value, 'PXAT', string.format('%d', wl))
end
