-- A part of gcra.lua, written into it where a line says "--> answer.lua"
-- (see include in scripts.go): it appends to out (no numbers so far) the
-- answer for a request that decide.lua decided: d*4 + status when d < 2^50,
-- else -1 - status, then d's seconds and nanoseconds.
if dh >= 1125899 then
  out[no + 1], out[no + 2], out[no + 3] = -1 - status, dh, dl
  no = no + 3
else
  no = no + 1
  out[no] = (dh * 1000000000 + dl) * 4 + status
end
