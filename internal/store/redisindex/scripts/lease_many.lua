-- lease_many: take, for a lease call, up to a number of an app's pull tasks
-- due and waiting in its slots' PullQueues (score <= now: the due time of a
-- task waiting, or the end of another call's hold that ran out), holding
-- each for the caller until its hold ends (the score becomes the hold's
-- end), so that two calls, on any nodes, do not take the same task at once.
-- The caller then leases the tasks in SQL (the row decides) and mirrors
-- them: a task leased leaves the PullQueue for the PrepareQueue
-- (settle_many.lua); one it did not lease goes back, claimable at once, or
-- leaves. A call whose node dies before that leaves its tasks to be taken
-- again once the hold ends. The slots are visited from ARGV[4] on, in
-- turn, so that no slot's tasks wait behind another's; two commands per
-- slot that has tasks due (ZRANGEBYSCORE, ZADD), one per slot that has none.
-- KEYS: the app's PullQueues, one per slot, in slot order
-- ARGV: now (ms), hold end (ms), how many to take, the first slot (0-based)
-- Returns pairs: the slot (0-based index into KEYS) and the member taken.
local now, hold, want, first = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local out = {}
local got = 0
local n = #KEYS
for k = 0, n - 1 do
  if got >= want then break end
  local s = (first + k) % n
  local ms = redis.call('ZRANGEBYSCORE', KEYS[s + 1], '-inf', now, 'LIMIT', 0, want - got)
  if #ms > 0 then
    local add = {}
    for _, m in ipairs(ms) do
      add[#add + 1] = hold
      add[#add + 1] = m
      out[#out + 1] = s
      out[#out + 1] = m
    end
    redis.call('ZADD', KEYS[s + 1], 'XX', unpack(add))
    got = got + #ms
  end
end
return out
