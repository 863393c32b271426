-- add_many: put scheduled tasks' members of one slot in the StoreQueue at
-- their wake times, except those being delivered (in the PrepareQueue): a
-- promotion or a repair that races a claim must not make a task claimable
-- twice. A fixed few variadic commands whatever the number of members.
-- KEYS[1] store, KEYS[2] prepare, KEYS[3] dead
-- ARGV pairs: member (task id), score (wake time, unix ms)
-- Returns per member 1 where it was added, 0 where it is being delivered.
local n = #ARGV / 2
local members = {}
for i = 1, n do
  members[i] = ARGV[2 * i - 1]
end
local p = redis.call('ZMSCORE', KEYS[2], unpack(members))
local got, add, rem = {}, {}, {}
for i = 1, n do
  got[i] = 0
  if not p[i] then
    got[i] = 1
    rem[#rem + 1] = members[i]
    add[#add + 1] = ARGV[2 * i]
    add[#add + 1] = members[i]
  end
end
if #rem > 0 then
  redis.call('ZREM', KEYS[3], unpack(rem))
  redis.call('ZADD', KEYS[1], unpack(add))
end
return got
