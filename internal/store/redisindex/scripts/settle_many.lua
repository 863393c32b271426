-- settle_many: record where members of one slot go, each after its
-- attempt or write, in a fixed few variadic commands whatever their number
-- (what settle, one member per call, did one by one):
-- "retry" puts it in the StoreQueue at its score (out of the PrepareQueue
-- and the DeadQueue); "lease" keeps it in the PrepareQueue with its score
-- as the lease expiry (out of the StoreQueue); "dead" moves it to the
-- DeadQueue at its score; "ack" and "drop" remove it everywhere (finished,
-- cancelled, or beyond the hot window: SQL keeps it). A member that leaves
-- for good (ack, dead, drop) leaves the attempts hash too (claim_many.lua).
-- The caller passes each member once (a later write of one member goes to
-- a later call), so the removals and additions do not meet.
-- KEYS[1] store, KEYS[2] prepare, KEYS[3] dead, KEYS[4] attempts
-- ARGV triples: member, action, score (unix ms)
local remStore, remPrepare, remDead, forget = {}, {}, {}, {}
local addStore, addPrepare, addDead = {}, {}, {}
for i = 1, #ARGV, 3 do
  local m, a, s = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  if a == 'retry' then
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
if #remStore > 0 then redis.call('ZREM', KEYS[1], unpack(remStore)) end
if #remPrepare > 0 then redis.call('ZREM', KEYS[2], unpack(remPrepare)) end
if #remDead > 0 then redis.call('ZREM', KEYS[3], unpack(remDead)) end
if #forget > 0 then redis.call('HDEL', KEYS[4], unpack(forget)) end
if #addStore > 0 then redis.call('ZADD', KEYS[1], unpack(addStore)) end
if #addPrepare > 0 then redis.call('ZADD', KEYS[2], unpack(addPrepare)) end
if #addDead > 0 then redis.call('ZADD', KEYS[3], unpack(addDead)) end
return 1
