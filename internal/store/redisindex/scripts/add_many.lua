-- add_many: put scheduled tasks' members in their slots' StoreQueues at
-- their wake times, except those being delivered (in the PrepareQueue): a
-- promotion or a repair that races a claim must not make a task claimable
-- twice. A fixed few variadic commands per slot whatever the number of
-- members. One call may add in several slots (a group each; on Redis
-- Cluster one group per call).
-- KEYS: per group store, prepare, dead
-- ARGV: per group its member count, then pairs: member (task id), score
-- (wake time, unix ms)
-- Returns per member, groups in order, 1 where it was added, 0 where it is
-- being delivered.
local out = {}

local function add(store, prepare, dead, at, n)
  local members = {}
  for i = 1, n do
    members[i] = ARGV[at + 2 * (i - 1)]
  end
  local p = redis.call('ZMSCORE', prepare, unpack(members))
  local adds, rem = {}, {}
  for i = 1, n do
    if p[i] then
      out[#out + 1] = 0
    else
      out[#out + 1] = 1
      rem[#rem + 1] = members[i]
      adds[#adds + 1] = ARGV[at + 2 * (i - 1) + 1]
      adds[#adds + 1] = members[i]
    end
  end
  if #rem > 0 then
    redis.call('ZREM', dead, unpack(rem))
    redis.call('ZADD', store, unpack(adds))
  end
end

local at = 1
for g = 0, #KEYS / 3 - 1 do
  local n = tonumber(ARGV[at])
  add(KEYS[3 * g + 1], KEYS[3 * g + 2], KEYS[3 * g + 3], at + 1, n)
  at = at + 1 + 2 * n
end
return out
