-- Compacted terms written back, while this compactor still holds the namespace's lock
-- (compaction.py, rewrite): each term's new bytes, then whatever was appended to it since
-- it was read (appends only add at the end; nobody else rewrites it meanwhile). A term left
-- empty is deleted. Its junk goes down by what was counted when it was read.
-- KEYS[1]: the lock; KEYS[2]: junk; KEYS[3]: stats; then each stem's postings
-- ARGV[1]: the lock's token; ARGV[2]: the lock's new life (ms); ARGV[3]: the pass's next
--   cursor ('' to leave it); then per stem (in KEYS' order) its name, its length when read,
--   its new bytes, the junk it had, and how many records were removed
-- Returns 1, or 0 when the lock is no longer this compactor's (nothing was written).
local lock, junk, stats = KEYS[1], KEYS[2], KEYS[3]
if redis.call('GET', lock) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', lock, ARGV[2])
local at, removed = 4, 0
for k = 4, #KEYS do
  local stem, length, bytes = ARGV[at], tonumber(ARGV[at + 1]), ARGV[at + 2]
  local whole = bytes .. redis.call('GETRANGE', KEYS[k], length, -1)
  if #whole == 0 then redis.call('DEL', KEYS[k]) else redis.call('SET', KEYS[k], whole) end
  local left = (tonumber(redis.call('HGET', junk, stem)) or 0) - tonumber(ARGV[at + 3])
  if left > 0 then redis.call('HSET', junk, stem, left) else redis.call('HDEL', junk, stem) end
  removed = removed + tonumber(ARGV[at + 4])
  at = at + 5
end
if removed > 0 then
  local was = tonumber(redis.call('HGET', stats, 'junk')) or 0
  redis.call('HSET', stats, 'junk', math.max(0, was - removed))
end
if ARGV[3] ~= '' then redis.call('HSET', stats, 'cursor', ARGV[3]) end
return 1
