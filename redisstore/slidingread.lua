-- A part of family.lua and window.lua, written into them where a line says
-- "--> slidingread.lua" (see include in scripts.go): it reads the sliding
-- window counter raw (false when absent), of period p, into prev and cur,
-- the previous and current windows' counts at now (nowms, in the window
-- that starts at s; declared 0), or sets ok (declared true) false when
-- raw is not a sliding window's state.
if raw then
  local ss, sp, sprev, scur = match(raw, '^S(%d+):(%d+):(%d+):(%d+)$')
  if not ss then
    ok = false
  else
    ss, sp, sprev, scur = ss + 0, sp + 0, sprev + 0, scur + 0
    local at = 0
    if scur > 0 then
      at = ss + 2 * sp
    elseif sprev > 0 then
      at = ss + sp
    end
    if at > nowms then
      if ss >= s then
        -- (or a later window's: the clock was stepped back)
        prev, cur = sprev, scur
      elseif ss == s - p then
        prev = scur
      end
    end
  end
end
