-- range_after: the members of one queue (KEYS[1]) after a cursor, the
-- score from (ARGV[1], ms) and the member after (ARGV[2]), with a score <=
-- until (ARGV[3]), at most limit (ARGV[4]) of them, with their scores.
--
-- RangeSlots reads a queue from the cursor's millisecond with
-- ZRANGEBYSCORE; only when that millisecond holds a whole page of members
-- at or before the cursor (many tasks due in the same millisecond) does it
-- ask this script where the cursor is among them. Members of one score
-- sort by their bytes, so the first one after the cursor is found by a
-- binary search of their ranks. Member bytes are compared here one by
-- one: Lua's < on strings follows the server's locale.
local key, from, after, till, limit = KEYS[1], ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])

local function after_cursor(m)
  local n = math.min(#m, #after)
  for i = 1, n do
    local a, b = string.byte(m, i), string.byte(after, i)
    if a ~= b then
      return a > b
    end
  end
  return #m > #after
end

local first = redis.call('ZCOUNT', key, '-inf', '(' .. from)
local lo, hi = first, first + redis.call('ZCOUNT', key, from, from)
while lo < hi do
  local mid = math.floor((lo + hi) / 2)
  if after_cursor(redis.call('ZRANGE', key, mid, mid)[1]) then
    hi = mid
  else
    lo = mid + 1
  end
end
return redis.call('ZRANGEBYSCORE', key, from, till, 'WITHSCORES', 'LIMIT', lo - first, limit)
