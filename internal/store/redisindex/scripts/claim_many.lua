-- claim_many: claim, for the caller, the members of one slot that its timing
-- wheel says are due, in one script whatever their number. A member is
-- claimed when it is in the StoreQueue with a score <= now, or in the
-- PrepareQueue with a lease that ran out (score <= now: its attempt was
-- given up, and this caller takes the rollback); it then sits in the
-- PrepareQueue scored by the caller's lease end. Any other member is left
-- alone: another node claimed it, or it moved. Two nodes that both think they
-- own the slot contend here, and each member goes to one of them.
--
-- A claim for an attempt (its stored attempt count >= 0) numbers the
-- attempt: one more than the number the slot's attempts hash holds for the
-- member, or than its stored count when that is more; the hash keeps the
-- number, so an attempt whose node stopped during it (no outcome stored)
-- still counts, and two nodes' attempts never share a number.
--
-- The commands run are a fixed few per call (ZMSCORE of each queue, HMGET,
-- one variadic ZREM, ZADD and HSET), not a few per member, so a batch costs
-- Redis about what one member does.
-- KEYS[1] store, KEYS[2] prepare, KEYS[3] attempts (hash: member → number)
-- ARGV[1] now (ms), then triples: member, lease end (ms), stored attempt
-- count (-1: not an attempt, a rollback)
-- Returns per member: 0 where the caller does not hold it; where it does,
-- the attempt's number, or 1 for a rollback.
local now = tonumber(ARGV[1])
local n = (#ARGV - 1) / 3
local members = {}
for i = 1, n do
  members[i] = ARGV[3 * i - 1]
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
local counted = {}
for i = 1, n do
  if got[i] == 1 then
    add[#add + 1] = ARGV[3 * i]
    add[#add + 1] = members[i]
    if tonumber(ARGV[3 * i + 1]) >= 0 then
      counted[#counted + 1] = i
    end
  end
end
if #add > 0 then
  redis.call('ZADD', KEYS[2], unpack(add))
end
if #counted > 0 then
  local ms = {}
  for k, i in ipairs(counted) do
    ms[k] = members[i]
  end
  local h = redis.call('HMGET', KEYS[3], unpack(ms))
  local set = {}
  for k, i in ipairs(counted) do
    local a = math.max(tonumber(h[k]) or 0, tonumber(ARGV[3 * i + 1])) + 1
    got[i] = a
    set[#set + 1] = members[i]
    set[#set + 1] = a
  end
  redis.call('HSET', KEYS[3], unpack(set))
end
return got
