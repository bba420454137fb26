-- A part of the scripts that include tat.lua, store.lua, fixedread.lua or
-- slidingread.lua, written into them where a line says "--> fns.lua" (see
-- include in scripts.go): the functions those parts call for every key, as
-- locals. A library's function costs two table lookups at each call (the
-- library, then its field): 800 Redis instructions a decision in a batch
-- of funnel decisions (callgrind: 34,400 against 33,600), and 1,000 in a
-- batch of fixed windows (39,500 against 38,500).
local format, call, match = string.format, redis.call, string.match
