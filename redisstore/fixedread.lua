-- A part of family.lua and window.lua, written into them where a line says
-- "--> fixedread.lua" (see include in scripts.go): it reads the fixed
-- window raw (false when absent) into n, the units it counts in the window
-- that starts at s (declared 0; 0 when raw is another window's, earlier
-- or, after a clock stepped back, later), or sets ok (declared true) false
-- when raw is not a fixed window's state.
if raw then
  local fs, fe, fn = match(raw, '^F(%d+):(%d+):(%d+)$')
  if not fs then
    ok = false
  elseif fe + 0 > nowms and fs + 0 >= s then
    -- (a later window's: the clock was stepped back)
    n = fn + 0
  end
end
