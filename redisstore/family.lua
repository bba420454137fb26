-- Funnel's limiter family on Redis keys: the decisions of package algo (and
-- gcra for the funnel and the delaying bucket), for one key or for several
-- keys all-or-nothing, with bans. Go computes every number of the results
-- from what this returns (the state each request found, and now); this
-- script decides admission and keeps the state, by the same rules.
--
-- Times: now is kept on two limbs, seconds and nanoseconds (nanosecond
-- epochs do not fit in a double); window state, log entries and lease
-- expiries are whole milliseconds (exact in a double); the products of the
-- sliding counter stay below 2^53 because Go refuses count × period above it.
--
-- Key formats: the funnel and the delaying bucket share redis-cell's format
-- (the TAT as decimal nanoseconds); a fixed window is the string
-- "F<start_ms>:<end_ms>:<n>", a sliding window counter
-- "S<start_ms>:<period_ms>:<prev>:<cur>"; a sliding log of a count up to
-- LOGPACK (256 unless redisstore.Options.SortedSetLogs, 0) is the string
-- "L<period_ms>:" followed by its entries' milliseconds, six bytes each,
-- big-endian, oldest first (a packed log: one GET and one write a
-- decision, log.lua's, where a sorted set takes four to six commands, and
-- six bytes an entry), and one of a larger count a sorted set of
-- "<ms>:<seq>" members scored by their ms; a concurrency key is a sorted
-- set of lease ids scored by their expiry in ms. The sorted sets have a marker member
-- that names its kind, scored below every entry (-period for a log, the
-- period of the limit that wrote it last, which a packed log keeps in its
-- head; -1 - the key's unit delay in ns
-- for leases, -1 when it has none), so that the state says when it is
-- empty. A log is turned into the other form, the same state, when an op
-- of the other's count reads it (an older version's sorted set is packed).
-- A ban is the string of its end, in decimal
-- nanoseconds, under a key of its own in the same hash slot. Every key
-- expires when its state would be empty.
--
-- A key's limit may change between calls (a new configuration): the state
-- is then read as memstore reads it. A state that is empty by the limit
-- that wrote it reads as absent, whatever the new limit; a sliding log
-- keeps the entries that the current limit's period no longer counts until
-- it is written (a longer period counts them again); renewing a lease
-- under a shorter period can make it expire earlier.
--
-- KEYS     per op: the key, then its ban key; then, for a reservation's
--          call (alone in it), the reservation's record (see settle.lua)
-- ARGV     now's seconds ('' to read TIME; '-' to read it with a deadline,
--          see now.lua) and nanoseconds (or the deadline); milliseconds
--          added to every expiry (tests only) plus LOGPACK times 10^7 plus
--          conc.lua's CONCREAD times 10^10 (see below); the number of ops;
--          then per
--          op: kind (t take, r refund, c charge, p peek of n units: a take
--          never charged that starts no ban; v reserve: a take that records
--          a reservation, followed by its TTL and record; c, p and v alone
--          in their call, and not for concurrency; e settle: then only the
--          actual units on two limbs, the op is made from the record, see
--          settle.lua), algorithm (g l f s o c), quantity,
--          ban seconds and nanoseconds, and the algorithm's parameters:
--          g l: cost s, cost ns, tolerance s, tolerance ns
--          f:   count, period ms (0: calendar), then 6 ms: three spans
--          s o: count, period ms
--          c:   count (with the burst), period ms, lease id, default unit
--               delay ns ('' for 0), latency ns of a release (0: none; ''
--               or -1: the key's unit delay is not needed, and is not read)
--
-- Reply: now's seconds and nanoseconds, then 6 integers per op: status (0
-- refused, 1 allowed, 2 allowed but the new TAT would overflow int64, 3
-- banned; for a charge, which is applied unless its status is 2: 1 within
-- the limit after it, 0 over it, 2 a TAT beyond int64 or a window's count
-- beyond MaxCount (or, for the sliding counter, MaxWeight/period)), the
-- ban's remaining seconds and nanoseconds (when banned), and three numbers
-- of the state a take or a charge found (of the state a refund leaves):
--          g l: TAT - now (>= 0) seconds, nanoseconds, 0
--          f:   window start ms, window end ms, units in the window
--          s:   window start ms, previous window's units, current's
--          o:   units in the log, ms of the entry to wait for (-1), newest (-1)
--          c:   leases held, 1 if this lease is held + 2 × the key's unit
--               delay (ns, 0 when none; a take's before it, a release's
--               after it), the expiry to wait for (-1)
-- (for c, bans do not apply: the latest expiry of the leases held replaces
-- the ban's seconds, and the latest of the leases other than this one its
-- nanoseconds)
-- A settle answers { now's seconds, nanoseconds, -1 } for a reservation it
-- does not hold, else as a charge, followed by what record.lua adds.

local E9 = 1000000000
local nh, nl
--> fns.lua
local ti = 1
--> now.lua
local nowsub = nl % 1000000
local nowms = nh * 1000 + (nl - nowsub) / 1000000
-- the millisecond at or after now
local ceilms = nowms
if nowsub > 0 then
  ceilms = nowms + 1
end
-- ARGV[3] is the slack (below 10^7 ms) plus LOGPACK (below 1000) times
-- 10^7 plus conc.lua's CONCREAD times 10^10: one number, read once.
local slack0 = ARGV[3] + 0
local slack = slack0 % 10000000
local LOGPACK = (slack0 % 10000000000 - slack) / 10000000
local nops = ARGV[4] + 0

-- The commonest call: one take on a delaying bucket (or a funnel), a fixed
-- window of a fixed period or a sliding window counter, whose key is absent
-- or holds a state of its own kind, and whose ban key (when the limit has a
-- ban) is absent or holds a ban as written here. It is decided here, inline,
-- by the same rules as below, which any other call (and this one, when its
-- keys hold anything else) goes on to. The general path makes a closure per
-- helper function and a table per op at every call, which cost Redis more
-- than the decision itself.
local alg1 = ARGV[6]
if nops == 1 and ARGV[5] == 't' and (alg1 == 'g' or alg1 == 'l' or alg1 == 's' or (alg1 == 'f' and ARGV[11] ~= '0')) then
  local key, alg, ok = KEYS[1], alg1, true
  -- the ban's length, and what is left of a ban under way
  local lh, ll, rh, rl, banned = ARGV[8] + 0, ARGV[9] + 0, 0, 0, false
  if lh > 0 or ll > 0 then
    local b = redis.call('GET', KEYS[2])
    if b then
      local h, l = string.match(b, '^([1-9]%d%d%d%d%d%d%d%d%d)(%d%d%d%d%d%d%d%d%d)$')
      if not h then
        ok = false
      else
        h, l = h + 0, l + 0
        if h > 9223372036 or (h == 9223372036 and l > 854775807) then
          ok = false
        elseif nh < h or (nh == h and nl < l) then
          banned, rh, rl = true, h - nh, l - nl
          if rl < 0 then
            rh, rl = rh - 1, rl + 1000000000
          end
        end
      end
    end
  end
  -- a sorted set (a log, leases) answers an error: the general path says
  -- which
  local raw = false
  if ok then
    raw = redis.pcall('GET', key)
    if type(raw) == 'table' then
      ok = false
    end
  end
  local q = ARGV[7] + 0
  local st, r1, r2, r3 = 0, 0, 0, 0
  if not ok then
    -- below
  elseif alg == 'g' or alg == 'l' then
    -- The same parts as gcra.lua's (tat.lua reads the TAT, decide.lua
    -- decides, store.lua writes), in a block of their own: decide.lua
    -- declares status.
    local th, tl, bad = 0, 0, false
    if raw then
      --> tat.lua
    end
    if bad then
      ok = false
    else
      local ch, cl, vh, vl = ARGV[10] + 0, ARGV[11] + 0, ARGV[12] + 0, ARGV[13] + 0
      local wh, wl, wv, wms, wpx
      --> decide.lua
      r1, r2, st = dh, dl, status
      if banned then
        st = 3
      elseif status == 1 and q > 0 then
        --> store.lua
      end
    end
  elseif alg == 'f' then
    local count, period = ARGV[10] + 0, ARGV[11] + 0
    local n = 0
    local nowms = nh * 1000 + (nl - nl % 1000000) / 1000000
    local s = nowms - nowms % period
    local e = s + period
    --> fixedread.lua
    if ok then
      r1, r2, r3 = s, e, n
      if banned then
        st = 3
      elseif n + q > count then
        st = 0
      else
        st = 1
        if q > 0 then
          redis.call('PSETEX', key, string.format('%d', e - nowms + slack), string.format('F%d:%d:%d', s, e, n + q))
        end
      end
    end
  else -- 's'
    local count, p = ARGV[10] + 0, ARGV[11] + 0
    local prev, cur = 0, 0
    local nowms = nh * 1000 + (nl - nl % 1000000) / 1000000
    local s = nowms - nowms % p
    --> slidingread.lua
    if ok then
      r1, r2, r3 = s, prev, cur
      local el = nowms - s
      -- ceil(prev·(p−el)/p): below 2^53, as Go bounds (count+1)·p
      local w = prev * (p - el) + p - 1
      local est = cur + (w - w % p) / p
      if banned then
        st = 3
      elseif est + q > count then
        st = 0
      else
        st = 1
        if q > 0 then
          redis.call('PSETEX', key, string.format('%d', s + 2 * p - nowms + slack), string.format('S%d:%d:%d:%d', s, p, prev, cur + q))
        end
      end
    end
  end
  if ok then
    if st == 0 and q > 0 and (lh > 0 or ll > 0) then
      -- a refusal starts the limit's ban
      local uh, ul = nh + lh, nl + ll
      if ul >= 1000000000 then
        uh, ul = uh + 1, ul - 1000000000
      end
      local sub = ll % 1000000
      local px = lh * 1000 + (ll - sub) / 1000000 + slack
      if sub > 0 then
        px = px + 1
      end
      local v
      if uh > 0 then
        v = string.format('%d%09d', uh, ul)
      else
        v = string.format('%d', ul)
      end
      redis.call('PSETEX', KEYS[2], string.format('%d', px), v)
    end
    return { nh, nl, st, rh, rl, r1, r2, r3 }
  end
end

-- The same for one take on a sliding log of a count above LOGPACK (a
-- smaller one's take went to log.lua, and comes here only for a sorted
-- set, which the general path packs), without a ban, whose key is
-- absent or a live log: fewer reads than the general path (the newest
-- entry once; a string key answers the first read with an error).
if nops == 1 and ARGV[5] == 't' and ARGV[6] == 'o' and ARGV[8] == '0' and ARGV[9] == '0' and ARGV[7] + 0 < 490 and ARGV[10] + 0 > LOGPACK then
  local key = KEYS[1]
  local m = redis.pcall('ZRANGE', key, 0, 0, 'WITHSCORES')
  if not m.err and (not m[1] or m[1] == '\0log') then
    local q, count, period = ARGV[7] + 0, ARGV[10] + 0, ARGV[11] + 0
    local nowms = nh * 1000 + (nl - nl % 1000000) / 1000000
    local exists, last, lastm = m[1] ~= nil, -1, nil
    if exists then
      local r = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
      if r[2] + 0 >= 0 then
        last, lastm = r[2] + 0, r[1]
      end
    end
    -- a log empty under the limit that wrote it goes to the general path
    if not exists or (last >= 0 and last - m[2] > nowms) then
      local n, old = 0, 0
      if exists then
        old = redis.call('ZCOUNT', key, 0, nowms - period)
        n = redis.call('ZCARD', key) - 1 - old
      end
      local status, wait, newest = 1, -1, -1
      if n > 0 then
        newest = last
      end
      if n + q > count then
        status = 0
        if q <= count then
          wait = redis.call('ZRANGE', key, old + n + q - count, old + n + q - count, 'WITHSCORES')[2] + 0
        end
      elseif q > 0 then
        local at = ceilms
        if last > at then
          at = last
        end
        -- numbered after the newest entry of the millisecond (see below)
        local base = 0
        if last == at then
          base = string.match(lastm, ':(%d+)$') + 0
        end
        if exists then
          if old > 0 then
            redis.call('ZREMRANGEBYSCORE', key, 0, nowms - period)
          end
        end
        local args = { 'ZADD', key, -period, '\0log' }
        for j = 1, q do
          args[2 * j + 3] = at
          args[2 * j + 4] = string.format('%d:%08d', at, base + j)
        end
        redis.call(unpack(args))
        redis.call('PEXPIRE', key, string.format('%d', at + period - nowms + slack))
      end
      return { nh, nl, status, 0, 0, n, wait, newest }
    end
  end
end

-- less reports whether a < b on two limbs.
local function less(ah, al, bh, bl)
  return ah < bh or (ah == bh and al < bl)
end

-- sub returns a - b on two limbs (a >= b).
local function sub(ah, al, bh, bl)
  local h, l = ah - bh, al - bl
  if l < 0 then
    h, l = h - 1, l + E9
  end
  return h, l
end

-- add returns a + b on two limbs.
local function add(ah, al, bh, bl)
  local h, l = ah + bh, al + bl
  if l >= E9 then
    h, l = h + 1, l - E9
  end
  return h, l
end

-- decimal reads a decimal count of nanoseconds into limbs, or nil.
local function decimal(raw)
  local d = string.match(raw, '^%+?0*(%d*)$')
  if not d or not string.find(raw, '%d') or #d > 19 then
    return nil
  end
  local n, h, l = #d, 0, 0
  if n > 9 then
    h, l = string.sub(d, 1, n - 9) + 0, string.sub(d, n - 8) + 0
  elseif n > 0 then
    l = d + 0
  end
  if h > 9223372036 or (h == 9223372036 and l > 854775807) then
    return nil
  end
  return h, l
end

local function fmt(h, l)
  if h > 0 then
    return string.format('%d%09d', h, l)
  end
  return string.format('%d', l)
end

-- pxOf returns the expiry in ms, rounded up, of a duration on two limbs.
local function pxOf(h, l)
  local s = l % 1000000
  local ms = h * 1000 + (l - s) / 1000000
  if s > 0 then
    ms = ms + 1
  end
  return ms
end

-- ms formats a count of milliseconds for a command: Redis reads a string
-- argument faster than it converts a Lua number.
local function ms(n)
  return string.format('%d', n)
end

local function wrongtype(i)
  return redis.error_reply('WRONGTYPE funnel: key ' .. i .. ' holds the state of another algorithm')
end

local MARK = { o = '\0log', c = '\0conc' }

-- algo.MaxCount and algo.MaxWeight, the bounds of a window's count.
local MAXCOUNT, MAXWEIGHT = 1099511627776, 9007199254740992

-- zlast returns the score of the highest entry of a sorted set (above its
-- marker), or -1.
local function zlast(key)
  local r = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if r[2] and r[2] + 0 >= 0 then
    return r[2] + 0
  end
  return -1
end

-- zat returns the score of the entry of rank k (1 is the lowest entry, above
-- the marker).
local function zat(key, k)
  return redis.call('ZRANGE', key, k, k, 'WITHSCORES')[2] + 0
end

-- The logs' helpers (see the key formats), made by logs() when a call
-- first needs them: Redis pays for a closure at every call that makes one,
-- and most calls have no log.
local LOG
local function logs()
  if LOG then
    return
  end
  LOG = {}
  -- pent returns entry i (from 1) of the packed log raw whose entries start
  -- at off.
  LOG.pent = function(raw, off, i)
    return (struct.unpack('>I6', raw, off + 6 * (i - 1)))
  end

  -- plog returns a packed log of the period per whose entries are body (6
  -- bytes each) then k entries at the millisecond at.
  LOG.plog = function(per, body, at, k)
    local e = ''
    if k > 0 then
      e = string.rep(struct.pack('>I6', at), k)
    end
    return 'L' .. string.format('%d', per) .. ':' .. body .. e
  end

  -- plogz turns the sorted-set log key, of the period per, into a packed
  -- log, the same state, for a limit whose count is up to LOGPACK, and
  -- returns it and where its entries start.
  LOG.plogz = function(key, per)
    local r = redis.call('ZRANGE', key, 1, -1, 'WITHSCORES')
    local parts, last = {}, -1
    for i = 2, #r, 2 do
      last = r[i] + 0
      parts[#parts + 1] = struct.pack('>I6', last)
    end
    local raw = LOG.plog(per, table.concat(parts), 0, 0)
    redis.call('DEL', key)
    redis.call('PSETEX', key, string.format('%d', last + per - nowms + slack), raw)
    return raw, #raw - 6 * #parts + 1
  end

  -- zlog turns the packed log raw (entries from off, of the period per) into
  -- a sorted set, the same state, for a limit whose count is above LOGPACK.
  LOG.zlog = function(key, raw, off, per)
    local total = (#raw - off + 1) / 6
    redis.call('DEL', key)
    local args, k, seq, prev = { 'ZADD', key, -per, '\0log' }, 1, 0, -1
    for i = 1, total do
      local at = LOG.pent(raw, off, i)
      if at == prev then
        seq = seq + 1
      else
        prev, seq = at, 1
      end
      args[#args + 1] = at
      args[#args + 1] = string.format('%d:%08d', at, seq)
      k = k + 1
      if k >= 500 or i == total then
        redis.call(unpack(args))
        args, k = { 'ZADD', key }, 0
      end
    end
    if total == 0 then
      redis.call(unpack(args))
    end
    redis.call('PEXPIRE', key, string.format('%d', prev + per - nowms + slack))
  end

  -- logAnswer answers a log's op from n, the entries it counts, old, the
  -- entries before them, and entry(i), the millisecond of entry i (1 the
  -- oldest; after a refund, of the log it leaves): the status (a take over
  -- the count refused), the units counted, the entry to wait for and the
  -- newest entry's (-1: none). The newest is entry(total), or of a sorted
  -- set when total is -1.
  LOG.logAnswer = function(op, take, q, status, n, old, entry, total)
    local wait, newest = -1, -1
    if n > 0 then
      if total < 0 then
        newest = zlast(op.key)
      else
        newest = entry(total)
      end
    end
    if take and n + q > op.count then
      -- (a charge over the count waits for the same entry: the newest
      -- count+1 of the log it leaves are kept; a take under a ban too,
      -- whose RetryAfter is the later of the ban's and the log's own)
      if status == 1 then
        status = 0
      end
      if q <= op.count then
        wait = entry(old + n + q - op.count)
      end
    elseif not take and n > op.count then
      -- more entries than a lower count than the one that wrote them
      wait = entry(n - op.count)
    end
    return status, n, wait, newest
  end
end

--> settle.lua

-- Parse the ops.
local ops = {}
local a = 5
for i = 1, nops do
  -- Every field an op may get later is in the constructor (false until
  -- set), so that the table is made at its size once rather than grown
  -- twice as fields are added.
  local op = { kind = A[a], alg = A[a + 1], q = A[a + 2] + 0, bh = A[a + 3] + 0, bl = A[a + 4] + 0,
    key = KEYS[2 * i - 1], bkey = KEYS[2 * i], status = false, exists = false, replace = false, clear = false,
    th = false, tl = false, nh = false, nl = false, xh = false, xl = false, ch = false, cl = false, vh = false,
    vl = false, count = false, period = false, write = false, px = false, ws = false, we = false }
  a = a + 5
  local alg = op.alg
  if alg == 'o' then
    logs()
  end
  if alg == 'g' or alg == 'l' then
    op.ch, op.cl, op.vh, op.vl = A[a] + 0, A[a + 1] + 0, A[a + 2] + 0, A[a + 3] + 0
    a = a + 4
  else
    op.count, op.period = A[a] + 0, A[a + 1] + 0
    a = a + 2
    if alg == 'f' and op.period > 0 then
      op.ws = nowms - nowms % op.period
      op.we = op.ws + op.period
    elseif alg == 'f' then
      -- the calendar window that holds now, of the three given (ws stays
      -- false when none does: the clocks are apart)
      for j = a, a + 4, 2 do
        local s, e = A[j] + 0, A[j + 1] + 0
        if s <= nowms and nowms < e then
          op.ws, op.we = s, e
        end
      end
      a = a + 6
    elseif alg == 'c' then
      op.id, op.def, op.lat = A[a], tonumber(A[a + 1]) or 0, tonumber(A[a + 2]) or -1
      a = a + 3
    end
  end
  ops[i] = op
end

-- inspect reads key's state: its kind ('t' a TAT, 'f', 's', 'o', 'c'), nil
-- when absent, false when it holds something that is not ours; whether the
-- state is empty at now; and the state's fields.
local function inspect(key)
  local raw = redis.pcall('GET', key)
  if type(raw) == 'table' and raw.err then
    local m = redis.pcall('ZRANGE', key, 0, 0, 'WITHSCORES')
    if m.err or (m[1] ~= MARK.o and m[1] ~= MARK.c) then
      return false
    end
    local last = zlast(key)
    if m[1] == MARK.o then
      return 'o', last < 0 or last - m[2] <= nowms, nil, nil, -m[2]
    end
    return 'c', last <= nowms
  end
  if not raw then
    return nil
  end
  local c = string.sub(raw, 1, 1)
  if c == 'L' then
    -- a packed log: its entries, where they start, its writer's period
    local per, off = string.match(raw, '^L(%d+):()')
    if not per or (#raw - off + 1) % 6 ~= 0 then
      return false
    end
    per = per + 0
    logs()
    local total, last = (#raw - off + 1) / 6, -1
    if total > 0 then
      last = LOG.pent(raw, off, total)
    end
    return 'o', last < 0 or last + per <= nowms, raw, off, per
  elseif c == 'F' then
    local s, e, n = string.match(raw, '^F(%d+):(%d+):(%d+)$')
    if not s then
      return false
    end
    return 'f', e + 0 <= nowms, s + 0, n + 0, e + 0
  elseif c == 'S' then
    local s, p, prev, cur = string.match(raw, '^S(%d+):(%d+):(%d+):(%d+)$')
    if not s then
      return false
    end
    s, p, prev, cur = s + 0, p + 0, prev + 0, cur + 0
    local at = 0
    if cur > 0 then
      at = s + 2 * p
    elseif prev > 0 then
      at = s + p
    end
    return 's', at <= nowms, s, prev, cur
  end
  local h, l = decimal(raw)
  if not h then
    return false
  end
  return 't', not less(nh, nl, h, l), h, l
end

--> giveback.lua

-- Read every key's state, refusing a key that holds another kind of live
-- state (or anything not ours) before anything is written. A key whose
-- state is empty at now reads as absent.
for i = 1, nops do
  local op = ops[i]
  local want = op.alg
  if want == 'g' or want == 'l' then
    want = 't'
  end
  local kind, empty, a1, a2, a3 = inspect(op.key)
  if kind == false then
    return wrongtype(i)
  end
  if kind and kind ~= want and not empty then
    return wrongtype(i)
  end
  if kind and empty then
    -- An empty state of any kind (the same kind under a limit that has
    -- changed too) reads as absent, as in memstore. A funnel's ended
    -- state under another algorithm, or another algorithm's under a
    -- funnel, is dropped at once, whatever the op, as memstore drops it
    -- (a funnel's TAT and the others' states are kept apart there): kept,
    -- it would read live again after a clock stepped back, and answer
    -- WRONGTYPE.
    op.replace = true
    if (kind == 't') ~= (want == 't') then
      redis.call('DEL', op.key)
      op.replace = false
    end
    kind = nil
  end
  op.exists = kind ~= nil
  if want == 'o' then
    -- (a log's fields are set here only: a table made with fewer costs less)
    op.raw, op.off = false, false
    if kind == 'o' and a1 then
      if op.count > LOGPACK then
        -- (a limit whose count grew past what a packed log holds)
        LOG.zlog(op.key, a1, a2, a3)
      else
        op.raw, op.off = a1, a2
      end
    elseif kind == 'o' and op.count <= LOGPACK then
      -- a sorted set (an older version's, or a larger count's): packed
      op.raw, op.off = LOG.plogz(op.key, a3)
    end
    -- a log is packed when it is, or will be written, so
    op.packed = op.raw or (not op.exists and op.count <= LOGPACK)
  end
  if kind == 't' then
    op.th, op.tl = a1, a2
  elseif kind == 'f' then
    op.fs, op.fn = a1, a2
  elseif kind == 's' then
    op.ss, op.sp, op.sc = a1, a2, a3
  end
end

local out = { nh, nl }
local all = true

for i = 1, nops do
  local op = ops[i]
  -- a charge and a peek read the state and the ban as a take does
  local alg, q, take, charge = op.alg, op.q, op.kind ~= 'r', op.kind == 'c'
  local status, r1, r2, r3 = 1, 0, 0, 0
  local bh, bl = 0, 0
  -- A limit with a ban first looks for one.
  if take and (op.bh > 0 or op.bl > 0) then
    local raw = redis.call('GET', op.bkey)
    if raw then
      local uh, ul = decimal(raw)
      if uh and less(nh, nl, uh, ul) then
        status = 3
        bh, bl = sub(uh, ul, nh, nl)
      end
    end
  end
  if alg == 'g' or alg == 'l' then
    local th, tl = op.th or 0, op.tl or 0
    local dh, dl = 0, 0
    if less(nh, nl, th, tl) then
      dh, dl = sub(th, tl, nh, nl)
    end
    r1, r2 = dh, dl
    if charge then
      -- The TAT moves by the cost whatever it is: past the tolerance, a
      -- debt. 1 when it stays within it.
      local xh, xl = add(dh, dl, op.ch, op.cl)
      local zh, zl = add(nh, nl, xh, xl)
      if zh > 9223372036 or (zh == 9223372036 and zl > 854775807) then
        status = 2
      else
        op.nh, op.nl, op.xh, op.xl = zh, zl, xh, xl
        if status == 1 and less(op.vh, op.vl, xh, xl) then
          status = 0
        end
      end
    elseif take then
      if status == 1 then
        status = 0
        if not less(op.vh, op.vl, op.ch, op.cl) then
          local xh, xl = add(dh, dl, op.ch, op.cl)
          if not less(op.vh, op.vl, xh, xl) then
            local zh, zl = add(nh, nl, xh, xl)
            if zh > 9223372036 or (zh == 9223372036 and zl > 854775807) then
              status = 2
            else
              status = 1
              op.nh, op.nl, op.xh, op.xl = zh, zl, xh, xl
            end
          end
        end
      end
    else
      -- Refund: the TAT moves back by the cost, never before now. The
      -- reply is the state it leaves.
      if less(op.ch, op.cl, dh, dl) then
        op.xh, op.xl = sub(dh, dl, op.ch, op.cl)
        op.nh, op.nl = add(nh, nl, op.xh, op.xl)
        r1, r2 = op.xh, op.xl
      else
        op.clear = true
        r1, r2 = 0, 0
      end
    end
  elseif alg == 'f' then
    local s, e = op.ws, op.we
    if not s then
      return redis.error_reply('ERR funnel: the calendar window of key ' .. i .. ' is not near Redis time; are the clocks apart?')
    end
    local n = 0
    if op.fs and op.fs >= s then
      -- (a later window's: the clock was stepped back)
      n = op.fn
    end
    r1, r2, r3 = s, e, n
    if charge then
      if n + q > MAXCOUNT then
        status = 2
      else
        if status == 1 and n + q > op.count then
          status = 0
        end
        if q > 0 then
          op.write = string.format('F%d:%d:%d', s, e, n + q)
          op.px = e - nowms
        end
      end
    elseif take then
      if status == 1 then
        if n + q > op.count then
          status = 0
        elseif q > 0 then
          op.write = string.format('F%d:%d:%d', s, e, n + q)
          op.px = e - nowms
        end
      end
    elseif q > 0 then
      -- A refund keeps the state's window (a later one's, or under
      -- another limit of the algorithm one that this limit's holds), as
      -- memstore keeps it: a limit that reads the state's window as its
      -- own still counts the units left. A refund of 0 changes nothing.
      n = n - q
      if n > 0 then
        op.write = string.format('F%d:%d:%d', op.fs, e, n)
        op.px = e - nowms
      else
        op.clear = true
        n = 0
      end
      r3 = n
    end
  elseif alg == 's' then
    local p = op.period
    local s = nowms - nowms % p
    local prev, cur = 0, 0
    if op.ss and op.ss >= s then
      -- (or a later window's: the clock was stepped back)
      prev, cur = op.sp, op.sc
    elseif op.ss == s - p then
      prev = op.sc
    end
    r1, r2, r3 = s, prev, cur
    local el = nowms - s
    -- ceil(prev·(p−el)/p): below 2^53, as Go bounds (count+1)·p
    local w = prev * (p - el) + p - 1
    local est = cur + (w - w % p) / p
    if charge then
      -- the bounds of Go's count: MaxCount, and (cur+1)·p at most MaxWeight
      if cur + q > MAXCOUNT or cur + q >= (MAXWEIGHT - MAXWEIGHT % p) / p then
        status = 2
      else
        if status == 1 and est + q > op.count then
          status = 0
        end
        if q > 0 then
          op.write = string.format('S%d:%d:%d:%d', s, p, prev, cur + q)
          op.px = s + 2 * p - nowms
        end
      end
    elseif take then
      if status == 1 then
        if est + q > op.count then
          status = 0
        elseif q > 0 then
          cur = cur + q
          op.write = string.format('S%d:%d:%d:%d', s, p, prev, cur)
          op.px = s + 2 * p - nowms
        end
      end
    else
      cur = cur - q
      if cur < 0 then
        cur = 0
      end
      if cur > 0 then
        op.write = string.format('S%d:%d:%d:%d', s, p, prev, cur)
        op.px = s + 2 * p - nowms
      elseif prev > 0 then
        op.write = string.format('S%d:%d:%d:%d', s, p, prev, 0)
        op.px = s + p - nowms
      else
        op.clear = true
      end
      r3 = cur
    end
  elseif alg == 'o' and op.packed then
    -- The same as for a sorted set (below), on a packed log's entries.
    local raw, off, total = op.raw, op.off, 0
    if raw then
      total = (#raw - off + 1) / 6
    end
    local n, old, cut = 0, 0, nowms - op.period
    while old < total and LOG.pent(raw, off, old + 1) <= cut do
      old = old + 1
    end
    n = total - old
    if not take and op.exists then
      if n <= q then
        redis.call('DEL', op.key)
        raw, total, n = false, 0, 0
      else
        -- the old entries and the q newest dropped
        n = n - q
        raw = LOG.plog(op.period, string.sub(raw, off + 6 * old, off + 6 * (old + n) - 1), 0, 0)
        off = #raw - 6 * n + 1
        total, old = n, 0
        redis.call('PSETEX', op.key, ms(LOG.pent(raw, off, n) + op.period - nowms + slack), raw)
      end
      op.raw, op.off = raw, off
    end
    op.old, op.n = old, n
    status, r1, r2, r3 = LOG.logAnswer(op, take, q, status, n, old, function(i)
      return LOG.pent(raw, off, i)
    end, total)
  elseif alg == 'o' then
    -- Entries at or before nowms - period no longer count under this
    -- limit (old of them). They are dropped only when the log is written:
    -- a peek or a refusal leaves it as it is, as memstore does, so that a
    -- limit with a longer period still counts them.
    local n, old = 0, 0
    if op.exists then
      old = redis.call('ZCOUNT', op.key, 0, nowms - op.period)
      n = redis.call('ZCARD', op.key) - 1 - old
    end
    op.old = old
    if not take and op.exists then
      -- Refund: drop the old entries and the q newest ones; the reply is
      -- the log it leaves, whose marker and expiry follow this limit.
      if n <= q then
        redis.call('DEL', op.key)
        n = 0
      else
        if old > 0 then
          redis.call('ZREMRANGEBYSCORE', op.key, 0, nowms - op.period)
          old = 0
        end
        if q > 0 then
          redis.call('ZREMRANGEBYRANK', op.key, n - q + 1, n)
          n = n - q
        end
        redis.call('ZADD', op.key, -op.period, MARK.o)
        redis.call('PEXPIRE', op.key, ms(zlast(op.key) + op.period - nowms + slack))
      end
    end
    op.n = n
    status, r1, r2, r3 = LOG.logAnswer(op, take, q, status, n, old, function(i)
      return zat(op.key, i)
    end, -1)
  else -- 'c'
    -- last: the latest expiry of the leases held; others: the same without
    -- this one, which an acquire renews (perhaps to an earlier expiry, under
    -- a limit whose period was shortened)
    -- The expired leases (old of them) are dropped only by a write: a
    -- peek or a refusal leaves them, as memstore does.
    local n, held, wait, last, others, old = 0, 0, -1, -1, -1, 0
    local unit = 0
    if op.exists then
      old = redis.call('ZCOUNT', op.key, 0, nowms)
      n = redis.call('ZCARD', op.key) - 1 - old
      if op.lat >= 0 then
        unit = -1 - redis.call('ZSCORE', op.key, MARK.c)
      end
      local own = redis.call('ZSCORE', op.key, op.id)
      if own and own + 0 > nowms then
        held = 1
      end
      if n > 0 then
        last = zlast(op.key)
        others = last
        if own and own + 0 == last then
          others = -1
          local r = redis.call('ZRANGE', op.key, -2, -2, 'WITHSCORES')
          if r[2] + 0 > nowms then
            others = r[2] + 0
          end
        end
      end
    end
    op.n, op.old = n, old
    if take then
      if q > 1 then
        status = 0
      elseif q == 1 and held == 0 and n >= op.count then
        status = 0
        -- room for one once n−count+1 leases have expired
        wait = zat(op.key, old + n - op.count + 1)
      end
    else
      -- Release; the reply is the leases it leaves. A latency moves the
      -- unit delay to the mean of the two, rounded down, at least 1ns.
      if old > 0 and (held == 1 or op.lat <= 0) then
        -- (a latency reported for a lease not held is an error, which
        -- changes nothing)
        redis.call('ZREMRANGEBYSCORE', op.key, 0, nowms)
      end
      status = held
      if held == 1 then
        redis.call('ZREM', op.key, op.id)
        n = n - 1
        if n <= 0 then
          redis.call('DEL', op.key)
          last = -1
        else
          if op.lat > 0 then
            local sum = unit + op.lat
            unit = (sum - sum % 2) / 2
            if unit < 1 then
              unit = 1
            end
            redis.call('ZADD', op.key, -1 - unit, MARK.c)
          end
          last = zlast(op.key)
          redis.call('PEXPIRE', op.key, ms(last - nowms + slack))
        end
      end
    end
    op.unit = unit
    r1, r2, r3 = n, held + 2 * unit, wait
    bh, bl = last, others
  end
  if op.kind == 't' and status ~= 1 then
    all = false
  end
  op.status = status
  out[#out + 1] = status
  out[#out + 1] = bh
  out[#out + 1] = bl
  out[#out + 1] = r1
  out[#out + 1] = r2
  out[#out + 1] = r3
end

-- Commit: every take charged when all were admitted; else none, and the
-- refused limits that have a ban start it.
for i = 1, nops do
  local op = ops[i]
  local alg, q, take, charge = op.alg, op.q, op.kind ~= 'r', op.kind == 'c'
  if op.kind == 'p' or (charge and op.status == 2) then
    -- a peek stores nothing; a charge that does not fit changes nothing
  elseif op.kind == 't' and not all then
    if op.status == 0 and q > 0 and (op.bh > 0 or op.bl > 0) and alg ~= 'c' then
      local uh, ul = add(nh, nl, op.bh, op.bl)
      redis.call('SET', op.bkey, fmt(uh, ul), 'PX', ms(pxOf(op.bh, op.bl) + slack))
    end
  elseif take and q > 0 or not take then
    if op.replace and (alg == 'o' or alg == 'c') and take then
      -- (a refund writes nothing to an ended state, which stays as it
      -- is, as in memstore)
      redis.call('DEL', op.key)
    end
    if alg == 'g' or alg == 'l' then
      if op.clear then
        if op.exists then
          redis.call('DEL', op.key)
        end
      elseif op.nh then
        if op.xh == 0 and op.xl == 0 then
          if op.exists then
            redis.call('DEL', op.key)
          end
        else
          redis.call('SET', op.key, fmt(op.nh, op.nl), 'PX', ms(pxOf(op.xh, op.xl) + slack))
        end
      end
    elseif alg == 'f' or alg == 's' then
      if op.write then
        redis.call('SET', op.key, op.write, 'PX', ms(op.px + slack))
      elseif op.clear and op.exists then
        redis.call('DEL', op.key)
      end
    elseif alg == 'o' and op.packed then
      if take or charge then
        -- As for a sorted set (below): the old entries dropped, q entries
        -- at the millisecond at or after now (never below the newest),
        -- the newest count+1 kept.
        local raw, off, total = op.raw, op.off, 0
        if raw then
          total = (#raw - off + 1) / 6
        end
        local at = ceilms
        if total > 0 then
          local newest = LOG.pent(raw, off, total)
          if newest >= at then
            at = newest
          end
        end
        local keep = op.count + 1
        local k = math.min(q, keep)
        local from, live = op.old + 1, total - op.old
        if live + k > keep then
          from, live = from + live + k - keep, keep - k
        end
        local body = ''
        if live > 0 then
          body = string.sub(raw, off + 6 * (from - 1))
        end
        redis.call('PSETEX', op.key, ms(at + op.period - nowms + slack), LOG.plog(op.period, body, at, k))
      end
    elseif alg == 'o' then
      if take or charge then
        -- Recorded at the millisecond at or after now, never below the
        -- newest entry (a clock that went back). A charge's units may go
        -- past the count, and the log then keeps its newest count+1
        -- entries (the units beyond them decide nothing; see
        -- algo.LogCharge); an admitted take's never reach that bound.
        -- Entries of one millisecond are numbered from 1, new ones after
        -- the newest of their millisecond (the oldest of a millisecond
        -- may have been dropped: a charge's, once newer entries were
        -- refunded after a clock stepped back): when the kept ones are all
        -- of the charge's millisecond, they are written afresh. ZADD takes
        -- at most 500 members at a time (Lua's C stack). The first also
        -- sets the marker's score to this limit's period (a limit may
        -- change: the state is empty a period after its newest entry,
        -- under the limit that wrote it last).
        local at = ceilms
        local e, top = 0, 0
        if op.exists then
          local r = redis.call('ZRANGE', op.key, -1, -1, 'WITHSCORES')
          local newest = -1
          if r[2] + 0 >= 0 then
            newest = r[2] + 0
          end
          if newest >= at then
            at = newest
            e = redis.call('ZCOUNT', op.key, at, at)
            top = string.match(r[1], ':(%d+)$') + 0
          end
          if op.old > 0 then
            redis.call('ZREMRANGEBYSCORE', op.key, 0, nowms - op.period)
          end
        end
        local keep = op.count + 1
        local first, total = top, op.n + q
        if e + q >= keep then
          if op.exists then
            redis.call('ZREMRANGEBYSCORE', op.key, 0, '+inf')
          end
          first, q, total = 0, keep, keep
        end
        local j = 0
        local args = { 'ZADD', op.key, -op.period, MARK.o }
        local k = 1
        while j < q do
          while j < q and k < 500 do
            j, k = j + 1, k + 1
            args[#args + 1] = at
            args[#args + 1] = string.format('%d:%08d', at, first + j)
          end
          redis.call(unpack(args))
          args, k = { 'ZADD', op.key }, 0
        end
        if total > keep then
          redis.call('ZREMRANGEBYRANK', op.key, 1, total - keep)
        end
        redis.call('PEXPIRE', op.key, ms(at + op.period - nowms + slack))
      end
    else -- 'c'
      if take then
        if op.old > 0 then
          redis.call('ZREMRANGEBYSCORE', op.key, 0, nowms)
        end
        -- a key takes the default unit delay when it has none
        if op.unit == 0 and (op.def > 0 or not op.exists) then
          redis.call('ZADD', op.key, -1 - op.def, MARK.c)
        end
        redis.call('ZADD', op.key, nowms + op.period, op.id)
        redis.call('PEXPIRE', op.key, ms(zlast(op.key) - nowms + slack))
      end
    end
  end
  if charge and op.status == 0 and q > 0 and (op.bh > 0 or op.bl > 0) then
    -- a charge that leaves the key over its limit starts the limit's ban
    local uh, ul = add(nh, nl, op.bh, op.bl)
    redis.call('SET', op.bkey, fmt(uh, ul), 'PX', ms(pxOf(op.bh, op.bl) + slack))
  end
end

--> record.lua

return out
