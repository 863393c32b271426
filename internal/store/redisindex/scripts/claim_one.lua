-- claim_one: claim one member the caller's timing wheel says is due. Moves it
-- from the StoreQueue to the PrepareQueue (score = lease expiry) if its score
-- is <= now, or, when it is already in the PrepareQueue with an expired lease,
-- re-scores it there (taking the rollback for this caller). Returns 1 when the
-- caller now holds it, 0 otherwise (claimed elsewhere, moved, or not due).
-- KEYS[1] store, KEYS[2] prepare
-- ARGV[1] member, ARGV[2] now (ms), ARGV[3] lease expiry (ms)
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if s then
  if tonumber(s) <= tonumber(ARGV[2]) then
    redis.call('ZREM', KEYS[1], ARGV[1])
    redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
    return 1
  end
  return 0
end
local p = redis.call('ZSCORE', KEYS[2], ARGV[1])
if p and tonumber(p) <= tonumber(ARGV[2]) then
  redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
  return 1
end
return 0
