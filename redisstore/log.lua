-- One take on a sliding log of a count up to family.lua's LOGPACK, without
-- a ban, whose key is absent or holds a packed log: family.lua's inline
-- decision for it (logtake.lua), as a script of its own, whose arguments
-- and reply are short (see window.lua for why that counts). Any other key
-- answers -1 and is left as it is: family.lua decides it.
--
-- KEYS[1]  the key
-- ARGV     now's seconds and nanoseconds ('' or '-' and a deadline, see
--          now.lua), milliseconds added to every expiry (tests only), the
--          quantity, the count, the period in ms
--
-- Reply: now's seconds and nanoseconds, then n*4 + status (n the units the
-- log counted before the take; status 1 admitted and written, 0 refused),
-- the millisecond of the entry to wait for (-1: none) and the newest
-- entry's (-1: none), as family.lua answers for a log; or -1.

local nh, nl
local ti = 1
--> now.lua
local slack = ARGV[3] + 0
local key = KEYS[1]
local raw = redis.pcall('GET', key)
local q, count, period, pstr = ARGV[4] + 0, ARGV[5] + 0, ARGV[6] + 0, ARGV[6]
local ok, status, n, wait, newest = false, 1, 0, -1, -1
--> logtake.lua
if not ok then
  return { nh, nl, -1 }
end
return { nh, nl, n * 4 + status, wait, newest }
