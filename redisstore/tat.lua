-- A part of gcra.lua and keyops.lua, written into them where a line says
-- "--> tat.lua" (see include in scripts.go): it reads the TAT in raw, a
-- string value in redis-cell's format, into the locals th, tl (seconds and
-- nanoseconds; the script declares them, 0 and 0) or sets bad (declared
-- false) to why raw is not a TAT: 1 not a decimal number, 2 beyond int64
-- nanoseconds.
--
-- Every TAT from 2001 to 2286 has 19 digits: one match splits it. Other
-- lengths, a '+' or leading zeros (Rust's u64 parser, which redis-cell uses,
-- takes both) take the second match.
local h, l = match(raw, '^([1-9]%d%d%d%d%d%d%d%d%d)(%d%d%d%d%d%d%d%d%d)$')
if h then
  th, tl = h + 0, l + 0
else
  local d = string.match(raw, '^%+?0*(%d*)$')
  if not d or not string.find(raw, '%d') then
    bad = 1
  else
    local n = #d
    if n > 19 then
      bad = 2
    elseif n > 9 then
      th, tl = string.sub(d, 1, n - 9) + 0, string.sub(d, n - 8) + 0
    elseif n > 0 then
      tl = d + 0
    end
  end
end
if th > 9223372036 or (th == 9223372036 and tl > 854775807) then
  th, tl, bad = 0, 0, 2
end
