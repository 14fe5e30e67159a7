-- A compaction pass begun or its numbers freed (compaction.py, compact_step), while this
-- compactor holds the namespace's lock. Begun: the numbers dead now are the pass's (purge),
-- its scan of the terms holding junk starts. Freed (once the scan has rewritten every term
-- that held junk when the pass began, so no record of these numbers is left): up to a
-- batch of the pass's numbers become free for new chunks, and the epoch moves on (a search
-- that saw an older epoch reads again: services/query/postings.py); the last batch ends the
-- pass.
-- KEYS: the namespace's postings keys, in postings.KEYS's order; KEYS[11]: purge;
--   KEYS[12]: the lock
-- ARGV[1]: the lock's token; ARGV[2]: the lock's new life (ms); ARGV[3]: 'begin' or 'free';
--   ARGV[4]: numbers freed at most
-- Returns the numbers freed ('begin': 0), or -1 when the lock is no longer this compactor's.
local dead, free, stats, purge, lock = KEYS[5], KEYS[8], KEYS[10], KEYS[11], KEYS[12]
if redis.call('GET', lock) ~= ARGV[1] then return -1 end
redis.call('PEXPIRE', lock, ARGV[2])
if ARGV[3] == 'begin' then
  if redis.call('EXISTS', dead) == 1 then redis.call('COPY', dead, purge, 'REPLACE')
  else redis.call('DEL', purge) end
  redis.call('HSET', stats, 'pass', 1, 'cursor', '0')
  return 0
end
local freed, most, from = 0, tonumber(ARGV[4]), 0
while freed < most do
  local number = redis.call('BITPOS', purge, 1, from)
  if number < 0 then break end
  from = math.floor(number / 8)
  redis.call('SETBIT', purge, number, 0)
  redis.call('SETBIT', dead, number, 0)
  redis.call('RPUSH', free, number)
  freed = freed + 1
end
if freed > 0 then
  redis.call('HINCRBY', stats, 'epoch', 1)
  local was = tonumber(redis.call('HGET', stats, 'dead')) or 0
  redis.call('HSET', stats, 'dead', math.max(0, was - freed))
end
if freed < most then
  redis.call('DEL', purge)
  redis.call('HSET', stats, 'pass', 0, 'cursor', '0')
end
return freed
