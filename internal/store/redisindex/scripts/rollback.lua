-- rollback: move members whose lease ran out (PrepareQueue score <= now)
-- back to the StoreQueue at now, up to ARGV[2] of them. The SQL row decides
-- what the attempt counts as; this only makes the member claimable again.
-- KEYS[1] store, KEYS[2] prepare
-- ARGV[1] now (ms), ARGV[2] max
local gone = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
for _, m in ipairs(gone) do
  redis.call('ZREM', KEYS[2], m)
  redis.call('ZADD', KEYS[1], ARGV[1], m)
end
return gone
