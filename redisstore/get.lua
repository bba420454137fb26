-- A part of gcra.lua and lease.lua, written into them where a line says
-- "--> get.lua" (see include in scripts.go): it reads the key named key
-- into raw (false when absent) and its TAT into th, tl (declared by the
-- script, 0 and 0), or returns the WRONGTYPE error of a key that holds
-- anything but a decimal TAT within int64 (and leaves it as it is).
local raw = redis.pcall('GET', key)
if raw then
  if raw.err then
    -- a list, a hash...: GET's own WRONGTYPE error
    return redis.error_reply('WRONGTYPE the value is not a string')
  end
  local bad = false
  --> tat.lua
  if bad == 1 then
    return redis.error_reply('WRONGTYPE the value is not a decimal number')
  elseif bad then
    return redis.error_reply('WRONGTYPE the value is beyond int64 nanoseconds')
  end
end
