-- A part of gcra.lua, written into it where a line says "--> store.lua"
-- (see include in scripts.go): it writes the TAT th, tl, which is xh, xl
-- (>= 0) ahead of now, to the key named key, which exists if raw. A TAT at
-- now is the same state as an absent key: the key is deleted. Otherwise it
-- expires when the TAT is reached, in whole milliseconds rounded up (so that
-- it never vanishes while its TAT is ahead), plus slack. The value and the
-- expiry are formatted only when they differ from the last ones written (wh,
-- wl, wv; wms, wpx: keys decided alike in a batch, such as fresh keys under
-- one limit, get the same; nil before the first), and given to PSETEX as
-- strings (Redis would format a number with %.17g, which costs more; SET
-- with PX parses an option more: 11,038 Redis instructions per call from
-- Lua against PSETEX's 10,456, callgrind).
if xh == 0 and xl == 0 then
  if raw then
    call('DEL', key)
  end
else
  local sub = xl % 1000000
  local ms = xh * 1000 + (xl - sub) / 1000000 + slack
  if sub > 0 then
    ms = ms + 1
  end
  if th ~= wh or tl ~= wl then
    wh, wl = th, tl
    if th > 0 then
      wv = format('%d%09d', th, tl)
    else
      wv = format('%d', tl)
    end
  end
  if ms ~= wms then
    wms, wpx = ms, format('%d', ms)
  end
  call('PSETEX', key, wpx, wv)
end
