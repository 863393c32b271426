-- settle: the second phase. Record where a member goes after its attempt:
-- ARGV[2] = "ack" removes it; "retry" moves it back to the StoreQueue at
-- ARGV[3]; "lease" keeps it in the PrepareQueue with lease expiry ARGV[3];
-- "dead" moves it to the DeadQueue at ARGV[3]; "drop" removes it everywhere
-- (finished, cancelled, or beyond the hot window: SQL keeps it).
-- A member that leaves for good (ack, dead, drop) leaves the attempts hash
-- too (claim_many.lua).
-- KEYS[1] store, KEYS[2] prepare, KEYS[3] dead, KEYS[4] attempts
-- ARGV[1] member, ARGV[2] action, ARGV[3] score
local m, a = ARGV[1], ARGV[2]
redis.call('ZREM', KEYS[1], m)
redis.call('ZREM', KEYS[2], m)
if a == 'retry' then
  redis.call('ZREM', KEYS[3], m)
  redis.call('ZADD', KEYS[1], ARGV[3], m)
elseif a == 'lease' then
  redis.call('ZADD', KEYS[2], ARGV[3], m)
elseif a == 'dead' then
  redis.call('ZADD', KEYS[3], ARGV[3], m)
  redis.call('HDEL', KEYS[4], m)
elseif a == 'drop' or a == 'ack' then
  redis.call('ZREM', KEYS[3], m)
  redis.call('HDEL', KEYS[4], m)
end
return 1
