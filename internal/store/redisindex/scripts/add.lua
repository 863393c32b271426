-- add: put a scheduled task's member in the StoreQueue at its wake time,
-- unless it is being delivered (in the PrepareQueue): a promotion or a repair
-- that races a claim must not make the task claimable twice.
-- KEYS[1] store, KEYS[2] prepare, KEYS[3] dead
-- ARGV[1] member (task id), ARGV[2] score (wake time, unix ms)
if redis.call('ZSCORE', KEYS[2], ARGV[1]) then
  return 0
end
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
return 1
