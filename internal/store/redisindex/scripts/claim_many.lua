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
-- attempt: one more than the number the attempts hash holds for the
-- member, or than its stored count when that is more; the hash keeps the
-- number, so an attempt whose node stopped during it (no outcome stored)
-- still counts, and two nodes' attempts never share a number.
--
-- One call may claim in several slots (a group each; on Redis Cluster the
-- caller sends one group per call, as a script's keys must share a hash
-- slot there). The commands run are a fixed few per group, not a few per
-- member, so a batch costs Redis about what one member does. The members a
-- wheel asks for are most often the earliest of their StoreQueue (they fell
-- due first), so a group first pops that many from its head (ZPOPMIN): the
-- members asked for and due are claimed, and any other popped is put back
-- at once with its score (ZADD), in the same script, so no one sees it
-- gone. Only the members asked for that were not popped are looked up
-- (ZMSCORE of each queue, one ZREM). Then one variadic ZADD to the
-- PrepareQueue: 2 commands for members at their queue's head. The
-- attempts hash is the call's, not the group's (on a standalone Redis one
-- hash serves every slot; on Redis Cluster the slot's own), so the
-- attempts of every group are numbered together at the end: HMGET and
-- HSET, or one HINCRBY for a lone attempt.
-- KEYS: per group store, prepare; then the attempts hash (member → number)
-- ARGV[1] now (ms), then per group: its member count, then triples: member,
-- lease end (ms), stored attempt count (-1: not an attempt, a rollback)
-- Returns per member, groups in order: 0 where the caller does not hold it;
-- where it does, the attempt's number, or 1 for a rollback.
local now = tonumber(ARGV[1])
local attempts = KEYS[#KEYS]
local out = {}
-- The attempts claimed, in order: member, stored count, index in out.
local counted = {}

-- scoresOf returns the scores in key of the members at the indexes idx.
local function scoresOf(key, members, idx)
  local ms = {}
  for k, i in ipairs(idx) do
    ms[k] = members[i]
  end
  return redis.call('ZMSCORE', key, unpack(ms))
end

-- claim claims the n members whose triples start at ARGV[at] in the slot
-- of keys store, prepare, appending the answers to out (an attempt's
-- number is filled in later, from counted).
local function claim(store, prepare, at, n)
  local members = {}
  for i = 1, n do
    members[i] = ARGV[at + 3 * (i - 1)]
  end
  local got, want = {}, {}
  for i = 1, n do
    got[i] = 0
    want[members[i]] = i
  end
  local fromStore, add = {}, {}
  local missing = {}
  -- The head of the StoreQueue: claim what was asked for and is due, put
  -- the rest back as it was.
  local seen, back = {}, {}
  local popped = redis.call('ZPOPMIN', store, n)
  for k = 1, #popped, 2 do
    local m, sc = popped[k], popped[k + 1]
    local i = want[m]
    if i then
      seen[i] = true
    end
    if i and tonumber(sc) <= now then
      got[i] = 1
    else
      back[#back + 1] = sc
      back[#back + 1] = m
    end
  end
  if #back > 0 then
    redis.call('ZADD', store, unpack(back))
  end
  -- The members asked for that were not at the head.
  local rest = {}
  for i = 1, n do
    if not seen[i] then
      rest[#rest + 1] = i
    end
  end
  if #rest > 0 then
    local s = scoresOf(store, members, rest)
    for k, i in ipairs(rest) do
      if s[k] then
        if tonumber(s[k]) <= now then
          got[i] = 1
          fromStore[#fromStore + 1] = members[i]
        end
      else
        missing[#missing + 1] = i
      end
    end
  end
  if #missing > 0 then
    local p = scoresOf(prepare, members, missing)
    for k, i in ipairs(missing) do
      if p[k] and tonumber(p[k]) <= now then
        got[i] = 1
      end
    end
  end
  if #fromStore > 0 then
    redis.call('ZREM', store, unpack(fromStore))
  end
  for i = 1, n do
    if got[i] == 1 then
      add[#add + 1] = ARGV[at + 3 * (i - 1) + 1]
      add[#add + 1] = members[i]
    end
  end
  if #add > 0 then
    redis.call('ZADD', prepare, unpack(add))
  end
  for i = 1, n do
    out[#out + 1] = got[i]
    local stored = tonumber(ARGV[at + 3 * (i - 1) + 2])
    if got[i] == 1 and stored >= 0 then
      counted[#counted + 1] = {members[i], stored, #out}
    end
  end
end

local at = 2
for g = 0, (#KEYS - 1) / 2 - 1 do
  local n = tonumber(ARGV[at])
  claim(KEYS[2 * g + 1], KEYS[2 * g + 2], at + 1, n)
  at = at + 1 + 3 * n
end

-- Number the attempts: one more than the number held for the member, or
-- than its stored count when that is more. A member claimed twice in one
-- call (two groups) is numbered in order.
if #counted == 1 then
  -- One command in the common case: the number held plus one is the
  -- attempt's, unless the stored count is ahead of it.
  local m, stored, o = counted[1][1], counted[1][2], counted[1][3]
  local a = redis.call('HINCRBY', attempts, m, 1)
  if a <= stored then
    a = stored + 1
    redis.call('HSET', attempts, m, a)
  end
  out[o] = a
elseif #counted > 1 then
  local ms = {}
  for k, c in ipairs(counted) do
    ms[k] = c[1]
  end
  local h = redis.call('HMGET', attempts, unpack(ms))
  local given, set = {}, {}
  for k, c in ipairs(counted) do
    local a = math.max(given[c[1]] or tonumber(h[k]) or 0, c[2]) + 1
    given[c[1]] = a
    out[c[3]] = a
    set[#set + 1] = c[1]
    set[#set + 1] = a
  end
  redis.call('HSET', attempts, unpack(set))
end
return out
