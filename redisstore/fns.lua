-- A part of the scripts that include tat.lua or store.lua, written into
-- them where a line says "--> fns.lua" (see include in scripts.go): the
-- functions those parts call for every key, as locals. A global function
-- costs two table lookups at each call (redis, then its field), which in a
-- batch of funnel decisions came to 800 Redis instructions a decision
-- (callgrind: 34,400 against 33,600).
local format, call, match = string.format, redis.call, string.match
