-- A part of gcra.lua, keyops.lua and family.lua, written into them where a
-- line says "--> now.lua" (see include in scripts.go): it sets the locals
-- nh, nl (declared by the script) to now's seconds and nanoseconds: Redis's
-- own TIME when ARGV[ti] is '', else ARGV[ti] and ARGV[ti + 1], an injected
-- clock for tests. The script sets ti, the index of its time arguments.
if ARGV[ti] == '' then
  local t = redis.call('TIME')
  nh, nl = t[1] + 0, t[2] * 1000
else
  nh, nl = ARGV[ti] + 0, ARGV[ti + 1] + 0
end
