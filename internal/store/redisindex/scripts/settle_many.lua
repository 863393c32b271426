-- settle_many: record where members go, each after its attempt or write,
-- in a fixed few variadic commands per slot whatever their number (what
-- settle, one member per call, did one by one). One call may write in
-- several slots (a group each; on Redis Cluster the caller sends one group
-- per call, as a script's keys must share a hash slot there):
-- "retry" puts it in the StoreQueue at its score (out of the PrepareQueue
-- and the DeadQueue); "lease" keeps it in the PrepareQueue with its score
-- as the lease expiry (out of the StoreQueue); "dead" moves it to the
-- DeadQueue at its score; "ack" and "drop" remove it everywhere (finished,
-- cancelled, or beyond the hot window: SQL keeps it). A member that leaves
-- for good (ack, dead, drop) leaves the attempts hash too (claim_many.lua).
-- "queue-pull" puts a pull task waiting for a lease in the slot's
-- PullQueue at its due time (lease_many.lua); the caller sends it after
-- the member's other write (a later group); "queue-pull-nx" does unless it is
-- there already (a promotion's: the member may be held by a lease call,
-- or have its due time while the promotion read a deadline). Any other action with a "+"
-- after it (a pull task's) also takes the member out of the PullQueue
-- (a push task's member is never there: its writes cost no more).
-- The caller passes each member once (a later write of one member goes to
-- a later call), so the removals and additions do not meet.
-- KEYS: per group store, prepare, dead, attempts, pull
-- ARGV: per group its member count, then triples: member, action, score
-- (unix ms)
-- settle writes the n members whose triples start at ARGV[at] in the slot
-- of keys store, prepare, dead, attempts, pull.
local function settle(store, prepare, dead, attempts, pull, at, n)
  local remStore, remPrepare, remDead, remPull, forget = {}, {}, {}, {}, {}
  local addStore, addPrepare, addDead, addPull, addPullNX = {}, {}, {}, {}, {}
  for i = at, at + 3 * (n - 1), 3 do
    local m, a, s = ARGV[i], ARGV[i + 1], ARGV[i + 2]
    if string.sub(a, -1) == '+' then
      a = string.sub(a, 1, -2)
      remPull[#remPull + 1] = m
    end
    if a == 'queue-pull' then
      addPull[#addPull + 1] = s
      addPull[#addPull + 1] = m
    elseif a == 'queue-pull-nx' then
      addPullNX[#addPullNX + 1] = s
      addPullNX[#addPullNX + 1] = m
    elseif a == 'retry' then
      remPrepare[#remPrepare + 1] = m
      remDead[#remDead + 1] = m
      addStore[#addStore + 1] = s
      addStore[#addStore + 1] = m
    elseif a == 'lease' then
      remStore[#remStore + 1] = m
      addPrepare[#addPrepare + 1] = s
      addPrepare[#addPrepare + 1] = m
    elseif a == 'dead' then
      remStore[#remStore + 1] = m
      remPrepare[#remPrepare + 1] = m
      addDead[#addDead + 1] = s
      addDead[#addDead + 1] = m
      forget[#forget + 1] = m
    else -- ack, drop
      remStore[#remStore + 1] = m
      remPrepare[#remPrepare + 1] = m
      remDead[#remDead + 1] = m
      forget[#forget + 1] = m
    end
  end
  if #remStore > 0 then redis.call('ZREM', store, unpack(remStore)) end
  if #remPrepare > 0 then redis.call('ZREM', prepare, unpack(remPrepare)) end
  if #remDead > 0 then redis.call('ZREM', dead, unpack(remDead)) end
  if #remPull > 0 then redis.call('ZREM', pull, unpack(remPull)) end
  if #forget > 0 then redis.call('HDEL', attempts, unpack(forget)) end
  if #addStore > 0 then redis.call('ZADD', store, unpack(addStore)) end
  if #addPrepare > 0 then redis.call('ZADD', prepare, unpack(addPrepare)) end
  if #addDead > 0 then redis.call('ZADD', dead, unpack(addDead)) end
  if #addPull > 0 then redis.call('ZADD', pull, unpack(addPull)) end
  if #addPullNX > 0 then redis.call('ZADD', pull, 'NX', unpack(addPullNX)) end
end

local at = 1
for g = 0, #KEYS / 5 - 1 do
  local n = tonumber(ARGV[at])
  settle(KEYS[5 * g + 1], KEYS[5 * g + 2], KEYS[5 * g + 3], KEYS[5 * g + 4], KEYS[5 * g + 5], at + 1, n)
  at = at + 1 + 3 * n
end
return 1
