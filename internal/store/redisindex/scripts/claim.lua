-- claim: the Alibaba two-phase consume, first phase. Move up to ARGV[3] due
-- members (score <= now) from the StoreQueue to the PrepareQueue, scored by
-- their lease expiry, atomically: two nodes that both think they own the slot
-- contend here, and each member goes to exactly one of them.
-- KEYS[1] store, KEYS[2] prepare
-- ARGV[1] now (ms), ARGV[2] lease expiry (ms), ARGV[3] max
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[3]))
for _, m in ipairs(due) do
  redis.call('ZREM', KEYS[1], m)
  redis.call('ZADD', KEYS[2], ARGV[2], m)
end
return due
