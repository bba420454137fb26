-- Redis's own GCRA command (src/gcra.c of Redis) on any Redis: it reads the
-- key as the command does, decides admission as the command does, and
-- writes what the command writes: the TAT in microseconds as a decimal
-- string, expiring at the TAT's millisecond (SET key tat PXAT tat/1000, the
-- command's own replication). A Redis that has the command reads the keys
-- this writes, and the reverse. Go computes the reply from what this
-- returns, by gcra.DecideCommand (the C function, line for line), so the
-- script keeps only what must happen in Redis: the read, the admission,
-- the write.
--
-- Times are integers of microseconds up to 2^63-1, beyond the 2^53 of Lua's
-- doubles, so each is kept on two limbs, h*1e9 + l with 0 <= l < 1e9, on
-- which sums and comparisons are exact.
--
-- KEYS[1]  the key
-- ARGV[1]  '' to take now from Redis's TIME; tests only: now in ms
-- ARGV[2], ARGV[3]  the increment's limbs (interval * count, in µs)
-- ARGV[4], ARGV[5]  the variance's limbs (interval * (max_burst + 1))
-- ARGV[6]  '' to decide; 'r' to read the key only (the parameters overflow,
--          which the command reports after reading the key)
-- ARGV[7]  '' to expire the key at the TAT's millisecond (PXAT); tests
--          only: milliseconds added to the expiry, set from the injected now
--
-- Now is whole milliseconds, as the command's time is (its microseconds are
-- the milliseconds times 1000). The reply is {status, now_ms, exists, th,
-- tl}: th, tl the key's TAT before the call when exists is 1, and status
--   1  admitted, and the new TAT written
--   0  limited, nothing written
--   2  read only (ARGV[6] 'r')
--   3  the new TAT would pass 2^63-1 µs, nothing written
--  -1  the key holds a string that is not an integer (Redis's string2ll)
--  -2  the key holds an integer that is not positive
-- and a key of another type is Redis's WRONGTYPE error.
--
-- The command expires a key at the millisecond TAT/1000, and Redis keeps a
-- key until that millisecond has passed; but SET refuses to set an expiry
-- at or before now (it deletes the key), which a TAT within now's
-- millisecond would need. Such a key is written to expire a millisecond
-- later, and read as absent once its TAT's millisecond has passed, as the
-- command's key would be; so is a key that expires before now (Redis looks
-- keys up at the script's start, and TIME may read a later millisecond).
-- A key without an expiry (set by hand) is read as the command reads it.
local slack = ARGV[7]
--> cmdkey.lua
if bad then
  return { bad, nowms, 1, 0, 0 }
end

-- base = max(now, TAT), the TAT of an absent key being now
local bh, bl = nh, nl
if exists == 1 and (th > nh or (th == nh and tl > nl)) then
  bh, bl = th, tl
end
if ARGV[6] == 'r' then
  return { 2, nowms, exists, th, tl }
end

-- new = base + increment, which must not pass 2^63-1
local sh, sl = bh + ARGV[2], bl + ARGV[3]
if sl >= 1000000000 then
  sh, sl = sh + 1, sl - 1000000000
end
if sh > 9223372036 or (sh == 9223372036 and sl > 854775807) then
  return { 3, nowms, exists, th, tl }
end

-- admitted when now - (new - variance) >= 0, that is now + variance >= new
local ah, al = nh + ARGV[4], nl + ARGV[5]
if al >= 1000000000 then
  ah, al = ah + 1, al - 1000000000
end
if ah < sh or (ah == sh and al < sl) then
  return { 0, nowms, exists, th, tl }
end

--> cmdwrite.lua
return { 1, nowms, exists, th, tl }
