-- claim_many: claim, for the caller, the members of one slot that its timing
-- wheel says are due, in one script whatever their number. A member is
-- claimed when it is in the StoreQueue with a score <= now, or in the
-- PrepareQueue with a lease that ran out (score <= now: its attempt was
-- given up, and this caller takes the rollback); it then sits in the
-- PrepareQueue scored by the caller's lease end. Any other member is left
-- alone: another node claimed it, or it moved. Two nodes that both think they
-- own the slot contend here, and each member goes to one of them.
--
-- The commands run are a fixed few per call (ZMSCORE of each queue, one
-- variadic ZREM and ZADD), not a few per member, so a batch costs Redis
-- about what one member does.
-- KEYS[1] store, KEYS[2] prepare
-- ARGV[1] now (ms), then pairs: member, lease end (ms)
-- Returns a 0/1 per member: 1 where the caller now holds it.
local now = tonumber(ARGV[1])
local n = (#ARGV - 1) / 2
local members = {}
for i = 1, n do
  members[i] = ARGV[2 * i]
end
local got = {}
local fromStore, add = {}, {}
local missing = {}
local s = redis.call('ZMSCORE', KEYS[1], unpack(members))
for i = 1, n do
  got[i] = 0
  if s[i] then
    if tonumber(s[i]) <= now then
      got[i] = 1
      fromStore[#fromStore + 1] = members[i]
    end
  else
    missing[#missing + 1] = i
  end
end
if #missing > 0 then
  local ms = {}
  for k, i in ipairs(missing) do
    ms[k] = members[i]
  end
  local p = redis.call('ZMSCORE', KEYS[2], unpack(ms))
  for k, i in ipairs(missing) do
    if p[k] and tonumber(p[k]) <= now then
      got[i] = 1
    end
  end
end
if #fromStore > 0 then
  redis.call('ZREM', KEYS[1], unpack(fromStore))
end
for i = 1, n do
  if got[i] == 1 then
    add[#add + 1] = ARGV[2 * i + 1]
    add[#add + 1] = members[i]
  end
end
if #add > 0 then
  redis.call('ZADD', KEYS[2], unpack(add))
end
return got
