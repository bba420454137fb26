-- A part of gcra.lua, keyops.lua and family.lua, written into them where a
-- line says "--> now.lua" (see include in scripts.go): it sets the locals
-- nh, nl (declared by the script) to now's seconds and nanoseconds: Redis's
-- own TIME when ARGV[ti] is '' or '-', else ARGV[ti] and ARGV[ti + 1], an
-- injected clock for tests. The script sets ti, the index of its time
-- arguments. With '-', ARGV[ti + 1] is a deadline in microseconds of
-- Redis's clock: a script that starts after it (one that waited in a
-- frozen Redis while its client gave up) changes nothing and answers an
-- error that starts with DEADLINE, before it reads or writes any key.
-- With '~' followed by a time in microseconds of Redis's clock, the call
-- also carries the earliest time it expects (Options.ClockGuard): a script
-- that finds Redis's TIME before it (Redis's clock stepped back, or this
-- host's forward) changes nothing and answers an error that starts with
-- CLOCKSTEP.
local tv = ARGV[ti]
if tv == '' or tv == '-' or string.byte(tv) == 126 then
  local t = redis.call('TIME')
  local us = t[2] + 0
  nh, nl = t[1] + 0, us * 1000
  if tv ~= '' then
    local at = nh * 1000000 + us
    if at > ARGV[ti + 1] + 0 then
      return redis.error_reply('DEADLINE funnel: the script started after its deadline; nothing was changed')
    end
    if tv ~= '-' and at < string.sub(tv, 2) + 0 then
      return redis.error_reply('CLOCKSTEP funnel: Redis\'s time is before the earliest this call expects; nothing was changed')
    end
  end
else
  nh, nl = tv + 0, ARGV[ti + 1] + 0
end
