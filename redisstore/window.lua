-- One take, or a batch of takes, each on a fixed window of a fixed period
-- (not a calendar's) or on a sliding window counter, without a ban:
-- family.lua's inline decision for them, as a script of its own, whose
-- arguments and reply are short. What Redis spends on a call is its
-- arguments, the commands and C functions the script calls, and the
-- numbers of its reply (about a thousand Redis instructions each), more
-- than the decision: family.lua's call takes 13 arguments and two keys
-- (the ban's) and answers 8 numbers. A key that does not hold a window of
-- its request's kind, as family.lua writes it, goes to family.lua (which
-- reads another algorithm's empty state as absent, and answers WRONGTYPE
-- for the rest): its answer here is -1, and it is left as it is.
--
-- KEYS     the keys, in the order their requests are decided (a key may
--          come more than once: each request reads what the ones before it
--          wrote)
-- ARGV     now's seconds and nanoseconds ('' or '-' and a deadline, see
--          now.lua), milliseconds added to every expiry (tests only), then
--          three per request: the quantity, the count, and the period in
--          ms, negative for a sliding window counter (one argument fewer
--          than the algorithm's own)
--
-- Reply: now's seconds and nanoseconds, then two numbers per request:
-- n*4 + status (n the units the fixed window counted before the take, or
-- the sliding window's current count; status 1 allowed and written, 0
-- refused), or -1; and the sliding window's previous count (0 for a fixed
-- window, which a lone fixed window's reply leaves out). A window's start
-- (and a fixed window's end) follow from now and its period, as here.

local nh, nl
--> fns.lua
-- (GET, through pcall: a key of another kind is not an error here)
local rpcall = redis.pcall
local ti = 1
--> now.lua
local slack = ARGV[3] + 0
local nowms = nh * 1000 + (nl - nl % 1000000) / 1000000
local nk, out = #KEYS, nil
if nk > 1 then
  out = { nh, nl }
end
for i = 1, nk do
  local key, a = KEYS[i], 3 * i + 1
  local code, prev, fixed = -1, 0, true
  local raw = rpcall('GET', key)
  if type(raw) ~= 'table' then
    local q, count, p = ARGV[a] + 0, ARGV[a + 1] + 0, ARGV[a + 2] + 0
    if p < 0 then
      fixed, p = false, -p
    end
    local s = nowms - nowms % p
    if fixed then
      local e = s + p
      local n, ok = 0, true
      --> fixedread.lua
      if ok and n < 1125899906842624 then
        code = n * 4
        if n + q <= count then
          code = code + 1
          if q > 0 then
            call('PSETEX', key, format('%d', e - nowms + slack), format('F%d:%d:%d', s, e, n + q))
          end
        end
      end
    else
      local cur, ok = 0, true
      --> slidingread.lua
      if ok and cur < 1125899906842624 then
        local el = nowms - s
        -- ceil(prev·(p−el)/p): below 2^53, as Go bounds (count+1)·p
        local w = prev * (p - el) + p - 1
        code = cur * 4
        if cur + (w - w % p) / p + q <= count then
          code = code + 1
          if q > 0 then
            call('PSETEX', key, format('%d', s + 2 * p - nowms + slack), format('S%d:%d:%d:%d', s, p, prev, cur + q))
          end
        end
      else
        prev = 0
      end
    end
  end
  if nk == 1 then
    -- (a table made whole costs less than one grown)
    if fixed then
      return { nh, nl, code }
    end
    return { nh, nl, code, prev }
  end
  out[2 * i + 1] = code
  out[2 * i + 2] = prev
end
return out
