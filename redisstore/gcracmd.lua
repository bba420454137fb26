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
local key = KEYS[1]
local nowms
if ARGV[1] == '' then
  local t = redis.call('TIME')
  nowms = t[1] * 1000 + math.floor(t[2] / 1000)
else
  nowms = ARGV[1] + 0
end
local nsub = nowms % 1000000
local nh, nl = (nowms - nsub) / 1000000, nsub * 1000

local exists, th, tl = 0, 0, 0
local raw = redis.pcall('GET', key)
if raw then
  if type(raw) == 'table' and raw.err then
    return redis.error_reply('WRONGTYPE Operation against a key holding the wrong kind of value')
  end
  if raw == '0' then
    return { -2, nowms, 1, 0, 0 }
  end
  local n = #raw
  if n >= 21 or not string.find(raw, '^%-?[1-9]%d*$') then
    return { -1, nowms, 1, 0, 0 }
  end
  local neg = string.byte(raw, 1) == 45 -- '-'
  local d = raw
  if neg then
    d = string.sub(raw, 2)
  end
  local m = #d
  if m > 19 then
    return { -1, nowms, 1, 0, 0 }
  end
  local h, l = 0, d + 0
  if m > 9 then
    h, l = string.sub(d, 1, m - 9) + 0, string.sub(d, m - 8) + 0
  end
  -- within int64: 9223372036854775807, or ...808 for a negative
  if h > 9223372036 or (h == 9223372036 and (l > 854775808 or (l == 854775808 and not neg))) then
    return { -1, nowms, 1, 0, 0 }
  end
  if neg then
    return { -2, nowms, 1, 0, 0 }
  end
  exists, th, tl = 1, h, l
  -- A key whose millisecond has passed is absent for the command (see
  -- above): ours written within now's millisecond, or any that expired
  -- after the script started.
  local tms = (tl - tl % 1000) / 1000
  if th < nh or (th == nh and tms < nsub) then
    if ARGV[7] ~= '' then
      -- Tests: Redis's clock does not follow the injected one, and
      -- every key that expires is read as absent once its TAT's
      -- millisecond has passed.
      if redis.call('PTTL', key) >= 0 then
        exists, th, tl = 0, 0, 0
      end
    else
      local x = redis.pcall('PEXPIRETIME', key)
      if type(x) == 'number' and x > 0 and (x < nowms or x == th * 1000000 + tms + 1) then
        exists, th, tl = 0, 0, 0
      end
    end
  end
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

local value
if sh > 0 then
  value = string.format('%d%09d', sh, sl)
else
  value = string.format('%d', sl)
end
-- the expiry, new / 1000 in ms, on limbs: sh * 1e6 + wl
local wl = (sl - sl % 1000) / 1000
if ARGV[7] ~= '' then
  local px = (sh - nh) * 1000000 + wl - nsub + ARGV[7]
  if sh == nh and wl == nsub then
    px = px + 1
  end
  redis.call('SET', key, value, 'PX', string.format('%d', px))
elseif sh == nh and wl == nsub then
  redis.call('SET', key, value, 'PXAT', string.format('%d', nowms + 1))
elseif sh > 0 then
  redis.call('SET', key, value, 'PXAT', string.format('%d%06d', sh, wl))
else
  redis.call('SET', key, value, 'PXAT', string.format('%d', wl))
end
return { 1, nowms, exists, th, tl }
