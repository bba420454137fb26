-- A part of gcracmd.lua and gcralease.lua, written into them where a line
-- says "--> cmdkey.lua" (see include in scripts.go): it reads Redis's GCRA
-- command's key KEYS[1] as the command reads it. It sets the locals key,
-- nowms (now in whole milliseconds: Redis's TIME, or ARGV[1] in tests),
-- nsub, nh and nl (now's µs on two limbs, h*1e9 + l), raw (the key's value,
-- or false), exists (1 when the key holds a TAT, else 0) and th, tl (its
-- TAT in µs on two limbs), or bad: -1 for a string that is not an integer
-- (Redis's string2ll), -2 for an integer that is not positive, nil for a
-- TAT or no key. A key of another type answers Redis's WRONGTYPE error.
-- The script sets slack first: its ARGV of the expiry's test slack ('' to
-- expire at the TAT's millisecond).
--
-- A key whose millisecond has passed is absent for the command: the
-- command expires a key at the millisecond TAT/1000, and Redis keeps a key
-- until that millisecond has passed; but SET refuses to set an expiry at
-- or before now (it deletes the key), which a TAT within now's millisecond
-- would need. Such a key is written to expire a millisecond later (see
-- cmdwrite.lua), and read as absent once its TAT's millisecond has passed,
-- as the command's key would be; so is a key that expires before now
-- (Redis looks keys up at the script's start, and TIME may read a later
-- millisecond). A key without an expiry (set by hand) is read as the
-- command reads it.
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

local exists, th, tl, bad = 0, 0, 0, nil
local raw = redis.pcall('GET', key)
if raw then
  if type(raw) == 'table' and raw.err then
    return redis.error_reply('WRONGTYPE Operation against a key holding the wrong kind of value')
  end
  if raw == '0' then
    bad = -2
  elseif #raw >= 21 or not string.find(raw, '^%-?[1-9]%d*$') then
    bad = -1
  else
    local neg = string.byte(raw, 1) == 45 -- '-'
    local d = raw
    if neg then
      d = string.sub(raw, 2)
    end
    local m = #d
    local h, l = 0, 0
    if m > 19 then
      bad = -1
    else
      l = d + 0
      if m > 9 then
        h, l = string.sub(d, 1, m - 9) + 0, string.sub(d, m - 8) + 0
      end
      -- within int64: 9223372036854775807, or ...808 for a negative
      if h > 9223372036 or (h == 9223372036 and (l > 854775808 or (l == 854775808 and not neg))) then
        bad = -1
      elseif neg then
        bad = -2
      end
    end
    if not bad then
      exists, th, tl = 1, h, l
      -- A key whose millisecond has passed is absent for the command: ours
      -- written within now's millisecond, or any that expired after the
      -- script started.
      local tms = (tl - tl % 1000) / 1000
      if th < nh or (th == nh and tms < nsub) then
        if slack ~= '' then
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
  end
end
